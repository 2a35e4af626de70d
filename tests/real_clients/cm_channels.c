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
 * Last, with UNOWNED (an address on the host's subnet that nobody owns): a thread waits on a
 * channel whose id resolves UNOWNED (1 s timeout), and the main thread closes the channel's
 * descriptor meanwhile. The kernel keeps the channel until that wait returns, so the waiter gets
 * the event that was due: "a waiter when its channel closed with an event due: EVENT" (expected
 * RDMA_CM_EVENT_ADDR_ERROR), or "...: none in 4 s".
 *
 *   cm_channels LIMIT [UNOWNED]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

struct waiter {
	struct rdma_event_channel *channel;
	pthread_t thread;
	atomic_int state; /* 0 not yet waiting, 1 about to wait, 2 returned */
	int err;          /* rdma_get_cm_event's errno, or 0 */
	enum rdma_cm_event_type got;
};

static void *wait_for_event(void *arg)
{
	struct waiter *w = arg;
	struct rdma_cm_event *event;

	atomic_store(&w->state, 1);
	if (rdma_get_cm_event(w->channel, &event) != 0) {
		w->err = errno;
	} else {
		w->got = event->event;
		rdma_ack_cm_event(event);
	}
	atomic_store(&w->state, 2);
	return NULL;
}

static void sleep_ms(long ms)
{
	struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&t, NULL);
}

/* A thread waiting in rdma_get_cm_event on a new channel, 200 ms into its wait. */
static int start_waiter(struct waiter *w)
{
	w->channel = rdma_create_event_channel();
	if (!w->channel || pthread_create(&w->thread, NULL, wait_for_event, w) != 0) {
		perror("a channel and a thread to wait on it");
		return -1;
	}
	while (atomic_load(&w->state) == 0)
		sleep_ms(1);
	sleep_ms(200); /* into its wait: none of the lines this proves run in 200 ms */
	return 0;
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

	static struct waiter idle, due;

	if (start_waiter(&idle) != 0)
		return 1;
	rdma_destroy_event_channel(idle.channel);
	sleep_ms(300); /* a waiter woken by the close returns within microseconds */
	if (atomic_load(&idle.state) == 2)
		printf("a waiter when its channel closed: returned, %s\n",
		       idle.err ? strerror(idle.err) : "with an event");
	else
		printf("a waiter when its channel closed: still waiting\n");
	fflush(stdout);

	if (argc > 2) {
		struct rdma_cm_id *id;
		struct sockaddr_in dst = {.sin_family = AF_INET};

		if (inet_pton(AF_INET, argv[2], &dst.sin_addr) != 1)
			return 2;
		if (start_waiter(&due) != 0 || rdma_create_id(due.channel, &id, NULL, RDMA_PS_UDP) != 0 ||
		    rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000) != 0) {
			perror("an id resolving an address nobody owns");
			return 1;
		}
		close(due.channel->fd); /* the descriptor only: the waiter still uses the struct */
		for (i = 0; i < 400 && atomic_load(&due.state) != 2; i++)
			sleep_ms(10);
		if (atomic_load(&due.state) != 2)
			printf("a waiter when its channel closed with an event due: none in 4 s\n");
		else if (due.err)
			printf("a waiter when its channel closed with an event due: failed, %s\n", strerror(due.err));
		else
			printf("a waiter when its channel closed with an event due: %s\n", rdma_event_str(due.got));
		fflush(stdout);
	}
	return 0; /* exit ends a waiter still waiting, as it ends rping's */
}
