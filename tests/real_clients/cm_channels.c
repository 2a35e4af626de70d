/*
 * Opens rdma_cm event channels (rdma_create_event_channel, through droce exec) until one
 * fails or LIMIT + 8 are open; prints how many opened and the errno of the first failure; then
 * closes them all and opens one more. rdmacm_test.sh runs it against a droced started with
 * --cm-channels LIMIT: exactly LIMIT open, the next fails with EMFILE, and closing gives the
 * room back.
 *
 *   cm_channels LIMIT
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/rdma_cma.h>

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
	return 0;
}
