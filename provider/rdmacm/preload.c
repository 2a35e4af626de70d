/*
 * libdroce-rdmacm.so: /dev/infiniband/rdma_cm for unmodified librdmacm programs, served by droced
 * (issue #15, docs/cm.md). `droce exec` preloads it.
 *
 * Debian's librdmacm talks to the kernel's rdma_cm only by open()ing the node, fstat()ing it (it
 * must be a character device), write()ing command structs whose answers the kernel copies to a
 * `response` pointer inside the command, poll()ing the fd for events and close()ing it. This
 * library interposes those calls for that one path: open() connects a hidden SOCK_SEQPACKET socket
 * to droced (abi/rdmacm_channel.h) and returns the eventfd droced hands back (EFD_SEMAPHORE: its
 * count is the channel's queued events), so poll/epoll/select on it work unchanged; fstat() calls
 * it a character device; write() sends the command to droced and copies the answer to the command's
 * response pointer; close() closes both. GET_EVENT first takes one count from the eventfd, then the
 * event. droced made the eventfd non-blocking (so that no program can ever block droced on it);
 * fcntl() keeps the program's own view of O_NONBLOCK, and GET_EVENT waits in poll() unless the
 * program asked for non-blocking: the kernel's blocking, EAGAIN and EINTR.
 *
 * Every write() of the program passes through here: a descriptor that is not a channel costs one
 * table lookup. Commands on one channel are serialised by its mutex; a thread blocked in
 * GET_EVENT holds no lock (rping connects from one thread while another waits for events).
 *
 * close() while another thread is inside a command behaves as the kernel's: the descriptor goes
 * at once, the channel lives on until the command returns (the kernel's write() holds the file),
 * so a GET_EVENT blocked then stays blocked, and still gets an event that comes, and no thread
 * touches a freed channel (before, close() freed it under a thread waiting for droced's answer).
 * Debian 12's rping destroys its event channel while its CM thread waits in rdma_get_cm_event.
 * So a command holds a reference on its channel, GET_EVENT waits on a private duplicate of the
 * eventfd, and droced hears of the close (its socket closes) when the last reference goes.
 *
 * Not covered: dup()/fork() of a channel descriptor (the copy is a plain eventfd).
 */
/* The plain and the 64-bit names are both defined here, so none may alias the other. */
#undef _FILE_OFFSET_BITS
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "abi/rdmacm_channel.h"

#define EXPORT __attribute__((visibility("default")))

/* ucma command numbers and offsets (<rdma/rdma_user_cm.h>, ABI 4) this library must know. */
enum {
  CMD_CREATE_ID = 0,
  CMD_GET_EVENT = 12,
  CMD_SET_OPTION = 14,
  CMD_MIGRATE_ID = 18,
};
#define HDR_BYTES 8u
#define RESPONSE_AT 8u         /* most commands: u64 response right after the header */
#define CREATE_RESPONSE_AT 16u /* CREATE_ID: uid first */
#define OPTVAL_AT 8u           /* SET_OPTION: u64 optval, ..., u32 optlen at 28 */
#define OPTLEN_AT 28u
#define MIGRATE_FD_AT 20u      /* MIGRATE_ID: u32 fd of the old channel */

static const char kNode[] = "/dev/infiniband/rdma_cm";
#define MAX_FD 65536

struct channel {
  int sock;
  int wait_fd;      /* the eventfd again, for GET_EVENT: it outlives the program's close() */
  uint32_t id;      /* droced's channel number */
  int nonblocking;  /* the program's O_NONBLOCK (the descriptor itself always has it) */
  int refs;         /* the table's and each command's in progress, under table_lock */
  pthread_mutex_t lock;
};

static struct channel *_Atomic *table; /* by descriptor; allocated with the first channel */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static ssize_t (*real_write)(int, const void *, size_t);
static int (*real_close)(int);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_fstat)(int, struct stat *);
static int (*real_fstat64)(int, struct stat64 *);
static int (*real_fcntl)(int, int, ...);

static void *next(const char *name)
{
  return dlsym(RTLD_NEXT, name);
}

__attribute__((constructor)) static void init(void)
{
  real_write = next("write");
  real_close = next("close");
  real_open = next("open");
  real_open64 = next("open64");
  real_fstat = next("fstat");
  real_fstat64 = next("fstat64");
  real_fcntl = next("fcntl");
}

static struct channel *lookup(int fd)
{
  struct channel *_Atomic *t = table;

  if (!t || fd < 0 || fd >= MAX_FD)
    return NULL;
  return t[fd];
}

/* The channel behind fd with a reference the caller gives back with put(), or NULL. */
static struct channel *get(int fd)
{
  struct channel *c;

  if (!lookup(fd))
    return NULL; /* not a channel: no lock on the program's every write() */
  pthread_mutex_lock(&table_lock);
  c = table[fd];
  if (c)
    c->refs++;
  pthread_mutex_unlock(&table_lock);
  return c;
}

static void put(struct channel *c)
{
  int last;

  pthread_mutex_lock(&table_lock);
  last = --c->refs == 0;
  pthread_mutex_unlock(&table_lock);
  if (!last)
    return;
  real_close(c->sock); /* droced destroys the channel's ids (DREQ/REJ to peers) */
  real_close(c->wait_fd);
  pthread_mutex_destroy(&c->lock);
  free(c);
}

/* droced's CM socket: next to the control socket the device tree names. */
static int cm_socket_path(char *out, size_t len)
{
  const char *sysfs = getenv("SYSFS_PATH");
  char dir[4096];
  struct dirent *e;
  DIR *d;
  int found = -1;

  snprintf(dir, sizeof dir, "%s/class/infiniband", sysfs && *sysfs ? sysfs : "/sys");
  d = opendir(dir);
  if (!d)
    return -1;
  while (found != 0 && (e = readdir(d)) != NULL) {
    char file[4096 + 256 + 32], path[4096];
    FILE *f;
    size_t n;

    if (e->d_name[0] == '.')
      continue;
    snprintf(file, sizeof file, "%s/%s/droce_control_socket", dir, e->d_name);
    f = fopen(file, "re");
    if (!f)
      continue;
    n = fread(path, 1, sizeof path - 1, f);
    fclose(f);
    path[n] = '\0';
    path[strcspn(path, "\n")] = '\0';
    n = strlen(path);
    if (n > 5 && strcmp(path + n - 5, ".sock") == 0 && n + 3 < len) {
      memcpy(out, path, n - 5);
      strcpy(out + n - 5, ".cm.sock");
      found = 0;
    }
  }
  closedir(d);
  return found;
}

/* One request and its answer; HELLO's answer brings the eventfd (*fd_out, else -1). */
static int call(int sock, uint32_t op, const void *cmd, uint32_t cmd_len, const void *optval, uint32_t optval_len,
                struct droce_cm_reply *reply, void *resp, size_t resp_len, int *fd_out)
{
  struct droce_cm_request req = {DROCE_CM_MAGIC, op, cmd_len, optval_len};
  struct iovec iov[3] = {{&req, sizeof req}, {(void *)cmd, cmd_len}, {(void *)optval, optval_len}};
  char control[CMSG_SPACE(sizeof(int))];
  struct cmsghdr *c;
  struct msghdr m;
  struct iovec riov[2];
  ssize_t n;

  memset(&m, 0, sizeof m);
  m.msg_iov = iov;
  m.msg_iovlen = 3;
  do
    n = sendmsg(sock, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return -ENODEV;
  memset(&m, 0, sizeof m);
  riov[0].iov_base = reply;
  riov[0].iov_len = sizeof *reply;
  riov[1].iov_base = resp;
  riov[1].iov_len = resp_len;
  m.msg_iov = riov;
  m.msg_iovlen = 2;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  do
    n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (fd_out)
    *fd_out = -1;
  for (c = n > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(sizeof(int))) {
      int fd;

      memcpy(&fd, CMSG_DATA(c), sizeof fd);
      if (fd_out && *fd_out < 0)
        *fd_out = fd;
      else
        real_close(fd);
    }
  }
  if (n < (ssize_t)sizeof *reply || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
      reply->len > n - sizeof *reply) {
    if (fd_out && *fd_out >= 0) {
      real_close(*fd_out);
      *fd_out = -1;
    }
    return -ENODEV; /* droced went away, or answered what we cannot hold */
  }
  return 0;
}

static int open_channel(int flags)
{
  char path[4096];
  struct sockaddr_un addr;
  struct droce_cm_reply reply;
  struct channel *c = NULL;
  int efd = -1, wait_fd = -1, sock, rc;

  if (cm_socket_path(path, sizeof path) != 0 || strlen(path) >= sizeof addr.sun_path) {
    errno = ENOENT; /* as with no rdma_cm node */
    return -1;
  }
  sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (sock < 0)
    return -1;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  strcpy(addr.sun_path, path);
  rc = connect(sock, (struct sockaddr *)&addr, sizeof addr) == 0
           ? call(sock, DROCE_CM_HELLO, NULL, 0, NULL, 0, &reply, NULL, 0, &efd)
           : -ENOENT;
  if (rc == 0 && reply.status != 0)
    rc = reply.status;
  if (rc == 0 && (efd < 0 || efd >= MAX_FD))
    rc = efd < 0 ? -EPROTO : -EMFILE;
  if (rc == 0 && (wait_fd = real_fcntl(efd, F_DUPFD_CLOEXEC, 0)) < 0)
    rc = -errno;
  if (rc == 0 && !(c = calloc(1, sizeof *c)))
    rc = -ENOMEM;
  pthread_mutex_lock(&table_lock);
  if (rc == 0 && !table && !(table = calloc(MAX_FD, sizeof *table)))
    rc = -ENOMEM;
  if (rc != 0) {
    pthread_mutex_unlock(&table_lock);
    free(c);
    real_close(sock);
    if (efd >= 0)
      real_close(efd);
    if (wait_fd >= 0)
      real_close(wait_fd);
    errno = -rc;
    return -1;
  }
  if (!(flags & O_CLOEXEC))
    real_fcntl(efd, F_SETFD, 0);
  c->sock = sock;
  c->wait_fd = wait_fd;
  c->refs = 1; /* the table's */
  c->id = reply.channel;
  c->nonblocking = (flags & O_NONBLOCK) != 0;
  pthread_mutex_init(&c->lock, NULL);
  table[efd] = c;
  pthread_mutex_unlock(&table_lock);
  return efd;
}

/* One queued event's count, waited for as the kernel's GET_EVENT waits. */
static int take_count(struct channel *c)
{
  for (;;) {
    uint64_t one;
    struct pollfd p = {c->wait_fd, POLLIN, 0};

    if (read(c->wait_fd, &one, sizeof one) == sizeof one)
      return 0;
    if (errno != EAGAIN || c->nonblocking)
      return -1;
    if (poll(&p, 1, -1) < 0)
      return -1; /* EINTR: a signal, as the kernel's wait_event_interruptible */
  }
}

static ssize_t cm_write(struct channel *c, const void *buf, size_t len)
{
  uint8_t cmd[DROCE_CM_MAX_CMD];
  uint8_t resp[DROCE_CM_MAX_RESPONSE];
  uint8_t optval[DROCE_CM_MAX_OPTVAL];
  uint32_t optval_len = 0, hdr_cmd;
  uint16_t out;
  uint64_t response = 0;
  struct droce_cm_reply reply;
  int rc;

  if (len < HDR_BYTES || len > sizeof cmd) {
    errno = EINVAL;
    return -1;
  }
  memcpy(cmd, buf, len);
  memcpy(&hdr_cmd, cmd, 4);
  memcpy(&out, cmd + 6, 2);
  if (out > 0) {
    const size_t at = hdr_cmd == CMD_CREATE_ID ? CREATE_RESPONSE_AT : RESPONSE_AT;

    if (len < at + 8) {
      errno = EINVAL;
      return -1;
    }
    memcpy(&response, cmd + at, 8);
  }
  if (hdr_cmd == CMD_SET_OPTION && len >= OPTLEN_AT + 4) {
    uint64_t p;

    memcpy(&p, cmd + OPTVAL_AT, 8);
    memcpy(&optval_len, cmd + OPTLEN_AT, 4);
    if (optval_len > sizeof optval) {
      errno = EINVAL;
      return -1;
    }
    if (optval_len > 0) {
      if (!p) {
        errno = EFAULT;
        return -1;
      }
      memcpy(optval, (const void *)(uintptr_t)p, optval_len);
    }
  }
  if (hdr_cmd == CMD_MIGRATE_ID && len >= MIGRATE_FD_AT + 4) {
    int32_t old_fd;
    struct channel *old;

    memcpy(&old_fd, cmd + MIGRATE_FD_AT, 4);
    old = get(old_fd);
    if (!old) {
      errno = ENOENT;
      return -1;
    }
    memcpy(cmd + MIGRATE_FD_AT, &old->id, 4);
    put(old);
  }
  for (;;) {
    if (hdr_cmd == CMD_GET_EVENT && take_count(c) != 0)
      return -1;
    pthread_mutex_lock(&c->lock);
    rc = call(c->sock, DROCE_CM_COMMAND, cmd, (uint32_t)len, optval, optval_len, &reply, resp, sizeof resp, NULL);
    pthread_mutex_unlock(&c->lock);
    if (rc != 0) {
      errno = -rc;
      return -1;
    }
    /* GET_EVENT raced with a destroy that withdrew the event: wait for the next one. */
    if (!(hdr_cmd == CMD_GET_EVENT && reply.status == -EAGAIN))
      break;
  }
  if (reply.status != 0) {
    errno = -reply.status;
    return -1;
  }
  if (response && reply.len > 0)
    memcpy((void *)(uintptr_t)response, resp, reply.len < out ? reply.len : out);
  return (ssize_t)len;
}

EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
  struct channel *c = get(fd);

  if (c) {
    ssize_t n = cm_write(c, buf, len);
    int saved = errno;

    put(c);
    errno = saved;
    return n;
  }
  if (!real_write)
    init();
  return real_write(fd, buf, len);
}

EXPORT int close(int fd)
{
  struct channel *c = NULL;

  if (!real_close)
    init();
  if (lookup(fd)) {
    pthread_mutex_lock(&table_lock);
    c = table[fd];
    table[fd] = NULL;
    pthread_mutex_unlock(&table_lock);
  }
  if (c)
    put(c); /* the table's reference: the channel goes now, or when its last command returns */
  return real_close(fd);
}

static int is_node(const char *path)
{
  return path && strcmp(path, kNode) == 0;
}

/* open() and open64(): the node is a channel; anything else goes to `real` with its mode. */
static int open_or_channel(int (*real)(const char *, int, ...), const char *path, int flags, va_list ap)
{
  mode_t mode = 0;

  if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
    mode = va_arg(ap, mode_t);
  if (is_node(path))
    return open_channel(flags);
  return real(path, flags, mode);
}

EXPORT int open(const char *path, int flags, ...)
{
  va_list ap;
  int fd;

  if (!real_open)
    init();
  va_start(ap, flags);
  fd = open_or_channel(real_open, path, flags, ap);
  va_end(ap);
  return fd;
}

EXPORT int open64(const char *path, int flags, ...)
{
  va_list ap;
  int fd;

  if (!real_open64)
    init();
  va_start(ap, flags);
  fd = open_or_channel(real_open64, path, flags, ap);
  va_end(ap);
  return fd;
}

/* F_GETFL/F_SETFL on a channel: the program's O_NONBLOCK is kept apart (see the top). */
static int channel_fcntl(int fd, struct channel *c, int cmd, long arg)
{
  int fl;

  if (cmd == F_SETFL) {
    c->nonblocking = (arg & O_NONBLOCK) != 0;
    return real_fcntl(fd, F_SETFL, (int)(arg | O_NONBLOCK));
  }
  fl = real_fcntl(fd, F_GETFL);
  if (fl >= 0 && !c->nonblocking)
    fl &= ~O_NONBLOCK;
  return fl;
}

EXPORT int fcntl(int fd, int cmd, ...)
{
  struct channel *c = cmd == F_SETFL || cmd == F_GETFL ? get(fd) : NULL;
  va_list ap;
  long arg;

  va_start(ap, cmd);
  arg = va_arg(ap, long);
  va_end(ap);
  if (!real_fcntl)
    init();
  if (c) {
    int rc = channel_fcntl(fd, c, cmd, arg);
    int saved = errno;

    put(c);
    errno = saved;
    return rc;
  }
  return real_fcntl(fd, cmd, arg);
}

EXPORT int fcntl64(int fd, int cmd, ...)
{
  va_list ap;
  long arg;

  va_start(ap, cmd);
  arg = va_arg(ap, long);
  va_end(ap);
  return fcntl(fd, cmd, arg);
}

/* A channel is a character device, as the kernel's node (open_cdev() insists). */
static void as_chardev(mode_t *m, dev_t *rdev)
{
  *m = S_IFCHR | 0666;
  *rdev = makedev(10, 58);
}

EXPORT int fstat(int fd, struct stat *st)
{
  int rc;

  if (!real_fstat)
    init();
  rc = real_fstat(fd, st);
  if (rc == 0 && lookup(fd))
    as_chardev(&st->st_mode, &st->st_rdev);
  return rc;
}

EXPORT int fstat64(int fd, struct stat64 *st)
{
  int rc;

  if (!real_fstat64)
    init();
  rc = real_fstat64(fd, st);
  if (rc == 0 && lookup(fd))
    as_chardev(&st->st_mode, &st->st_rdev);
  return rc;
}
