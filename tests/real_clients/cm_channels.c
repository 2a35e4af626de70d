/*
 * Opens rdma_cm event channels (rdma_create_event_channel, through droce exec) until one
 * fails or LIMIT + 8 are open; prints how many opened and the errno of the first failure; then
 * closes them all and opens one more. rdmacm_test.sh runs it against a droced started with
 * --cm-channels LIMIT: exactly LIMIT open, the next fails with EMFILE, and closing gives the
 * room back.
 *
 * Then a thread waits in rdma_get_cm_event on a channel with no events while the main thread
 * destroys that channel, as Debian 12's rping does at its end. The kernel's waiter stays blocked
 * (its write() holds the file); one that returned with an error would make rping exit 255. It
 * prints "a waiter when its channel closed: still waiting" or "...: returned, <error>".
 *
 *   cm_channels LIMIT
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rdma/rdma_cma.h>

static atomic_int waiter_state; /* 0 not yet waiting, 1 about to wait, 2 returned */
static int waiter_errno;

static void *wait_for_event(void *arg)
{
	struct rdma_cm_event *event;

	atomic_store(&waiter_state, 1);
	if (rdma_get_cm_event(arg, &event) != 0)
		waiter_errno = errno;
	else
		rdma_ack_cm_event(event);
	atomic_store(&waiter_state, 2);
	return NULL;
}

static void sleep_ms(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&t, NULL);
}

int main(int argc, char **argv)
{
	int limit = argc > 1 ? atoi(argv[1]) : 0;
	struct rdma_event_channel **ch;
	int n = 0, err = 0, i;

	if (limit <= 0 || limit > 100000) {
		fprintf(stderr, "usage: cm_channels LIMIT\n");
		return 2;
	}
	ch = calloc((size_t)limit + 8, sizeof *ch);
	if (!ch)
		return 1;
	while (n < limit + 8) {
		ch[n] = rdma_create_event_channel();
		if (!ch[n]) {
			err = errno;
			break;
		}
		n++;
	}
	printf("opened %d, then %s\n", n, err ? strerror(err) : "no failure");
	for (i = 0; i < n; i++)
		rdma_destroy_event_channel(ch[i]);
	ch[0] = rdma_create_event_channel();
	printf("after closing them: %s\n", ch[0] ? "one more opens" : strerror(errno));
	if (ch[0])
		rdma_destroy_event_channel(ch[0]);
	free(ch);

	struct rdma_event_channel *waited = rdma_create_event_channel();
	pthread_t waiter;

	if (!waited || pthread_create(&waiter, NULL, wait_for_event, waited) != 0) {
		perror("a channel and a thread to wait on it");
		return 1;
	}
	while (atomic_load(&waiter_state) == 0)
		sleep_ms(1);
	sleep_ms(200); /* into its wait: none of the lines this proves run in 200 ms */
	rdma_destroy_event_channel(waited);
	sleep_ms(300); /* a waiter woken by the close returns within microseconds */
	if (atomic_load(&waiter_state) == 2)
		printf("a waiter when its channel closed: returned, %s\n",
		       waiter_errno ? strerror(waiter_errno) : "with an event");
	else
		printf("a waiter when its channel closed: still waiting\n");
	fflush(stdout);
	return 0; /* exit ends the waiter, as it ends rping's */
}
