/*
 * pod1-waiter: what the run entry point becomes once the pod's PID 1 is
 * running (issue 16). run (Go) sets everything up, then execs this in the
 * same process: the pod's lock (an inherited fd, never touched here) stays
 * held across the exec, PID 1 stays this process's child, and the stop
 * signals run blocked before the exec are still blocked, and still pending
 * if they came during it.
 *
 * It does what run did from there on, and nothing else: passes each stop
 * request on to PID 1 as sigpolicy says (SIGHUP, SIGINT, SIGTERM: a
 * graceful stop, sent as SIGTERM; SIGQUIT, SIGUSR1: a forced stop, sent as
 * SIGUSR1; a request only ever rises), ignores every other signal it can,
 * reaps PID 1, removes the pod's cgroups (deepest first; whatever is left
 * in them is killed), waits for the lock keeper, undoes the shared bind
 * of a mutable pod's app directory, and exits with PID 1's code, or 254
 * if PID 1 was killed.
 *
 * Usage (built by run, never by hand):
 *   pod1-waiter PID PIDFD KEEPER LEVEL STAGE2|- CGROUPDIR...
 * PID and PIDFD name PID 1; KEEPER is the lock keeper's pid (0: none);
 * LEVEL the stop already asked of run (0 none, 1 graceful, 2 forced);
 * STAGE2 the bind mount to undo; each CGROUPDIR is the pod's cgroup in one
 * hierarchy.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { LEVEL_NONE, LEVEL_STOP, LEVEL_FORCE };

/* rkt's stage1 failure code. */
#define CODE_FAILURE 254

/* How long cgroup removal waits for what is left in the cgroups to die
 * (cgroups.RemoveTimeout). */
#define REMOVE_TIMEOUT_MS 30000

__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	int len = snprintf(buf, sizeof buf, "stage1: ");
	len += vsnprintf(buf + len, sizeof buf - len, fmt, ap);
	va_end(ap);
	if (len >= (int)sizeof buf - 1)
		len = sizeof buf - 2;
	buf[len++] = '\n';
	(void)!write(2, buf, len);
}

static long number(const char *s, const char *field)
{
	char *end;
	errno = 0;
	long n = strtol(s, &end, 10);
	if (errno || end == s || *end || n < 0) {
		say("waiter: %s: not a number", field);
		exit(CODE_FAILURE);
	}
	return n;
}

/* The kernel's struct sigaction: set directly, so that signals 32 and 33,
 * which glibc's sigaction refuses, are ignored too. */
struct ksigaction {
	unsigned long handler, flags, restorer, mask;
};

static void ignore(int sig)
{
	struct ksigaction act = { .handler = (unsigned long)SIG_IGN };
	syscall(SYS_rt_sigaction, sig, &act, NULL, sizeof act.mask);
}

static int pidfd_send(int pidfd, int sig)
{
	return syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
}

static void msleep(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* kill_left kills whatever is left in the cgroup dir (an open directory):
 * on cgroup v2 with cgroup.kill (the whole subtree at once), else each pid
 * cgroup.procs lists. */
static void kill_left(int dir)
{
	int fd = openat(dir, "cgroup.kill", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, "1", 1);
		close(fd);
	}
	fd = openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	FILE *f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return;
	}
	long pid;
	while (fscanf(f, "%ld", &pid) == 1)
		if (pid > 0)
			kill((pid_t)pid, SIGKILL);
	fclose(f);
}

/* remove_tree removes the cgroup name in parent and everything below it,
 * deepest first; it returns 0 once it is gone, -1 if a directory is still
 * refused (something left in it). */
static int remove_tree(int parent, const char *name, int depth)
{
	if (unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
		return 0;
	if (depth > 64 || (errno != EBUSY && errno != ENOTEMPTY))
		return -1;
	int dir = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0)
		return errno == ENOENT ? 0 : -1;
	int fd = dup(dir);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		close(dir);
		return -1;
	}
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_type == DT_DIR && strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			remove_tree(dir, e->d_name, depth + 1);
	closedir(d);
	int rc = unlinkat(parent, name, AT_REMOVEDIR) == 0 || errno == ENOENT ? 0 : -1;
	if (rc)
		kill_left(dir);
	close(dir);
	return rc;
}

/* remove_cgroup removes the pod's cgroup at path in one hierarchy. PID 1
 * has been reaped, so every process of the pod's pid namespace is gone;
 * the cheap case is three rmdirs. rmdir can fail with EBUSY for a moment
 * after the last process left. */
static void remove_cgroup(const char *path)
{
	char *slash = strrchr(path, '/');
	if (path[0] != '/' || !slash || !slash[1]) {
		say("waiter: cgroup %s: not an absolute path", path);
		return;
	}
	char parent_path[4096];
	size_t n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= sizeof parent_path)
		return;
	memcpy(parent_path, path, n);
	parent_path[n] = 0;
	int parent = open(parent_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (parent < 0) {
		say("warning: remove cgroups: %s: %s", path, strerror(errno));
		return;
	}
	long deadline = now_ms() + REMOVE_TIMEOUT_MS;
	while (remove_tree(parent, slash + 1, 0)) {
		if (now_ms() > deadline) {
			say("warning: remove cgroups: processes left in %s after 30s", path);
			break;
		}
		msleep(2);
	}
	close(parent);
}

int main(int argc, char **argv)
{
	/* Before anything: run blocked every signal before the exec. The
	 * stop signals stay blocked, and the signalfd reads what came while
	 * they were, exec included; the others are unblocked once their
	 * disposition is set (below). */
	sigset_t stops;
	sigemptyset(&stops);
	sigaddset(&stops, SIGHUP);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	sigaddset(&stops, SIGQUIT);
	sigaddset(&stops, SIGUSR1);
	int sfd = signalfd(-1, &stops, SFD_CLOEXEC);
	/* Every other signal is ignored, as sigpolicy says run ignores it;
	 * SIGCHLD keeps its default, which leaves our children to wait. */
	for (int s = 1; s <= 64; s++)
		if (!sigismember(&stops, s) && s != SIGKILL && s != SIGSTOP && s != SIGCHLD)
			ignore(s);
	sigprocmask(SIG_SETMASK, &stops, NULL);

	if (argc < 6) {
		say("waiter: want PID PIDFD KEEPER LEVEL STAGE2 CGROUPDIR..., got %d arguments", argc - 1);
		return CODE_FAILURE;
	}
	pid_t pid = (pid_t)number(argv[1], "PID");
	int pidfd = (int)number(argv[2], "PIDFD");
	pid_t keeper = (pid_t)number(argv[3], "KEEPER");
	long level = number(argv[4], "LEVEL");
	const char *stage2 = argv[5];
	if (sfd < 0) {
		/* Nothing can be passed on: ending here makes PID 1 stop
		 * the pod (forced), as run's death does. */
		say("waiter: signalfd: %s", strerror(errno));
		return CODE_FAILURE;
	}
	if (level > LEVEL_NONE)
		pidfd_send(pidfd, level == LEVEL_FORCE ? SIGUSR1 : SIGTERM);

	int status = 0;
	struct pollfd fds[2] = { { .fd = sfd, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
	for (;;) {
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (fds[0].revents & POLLIN) {
			struct signalfd_siginfo si[8];
			ssize_t n = read(sfd, si, sizeof si);
			for (ssize_t i = 0; i < n / (ssize_t)sizeof si[0]; i++) {
				int s = si[i].ssi_signo;
				long want = s == SIGQUIT || s == SIGUSR1 ? LEVEL_FORCE : LEVEL_STOP;
				if (want > level)
					level = want;
				/* A repeated request is passed on again, as
				 * run did: it changes nothing in PID 1. */
				pidfd_send(pidfd, level == LEVEL_FORCE ? SIGUSR1 : SIGTERM);
			}
		}
		if (fds[1].revents & (POLLIN | POLLHUP))
			break;
	}
	/* PID 1 is our child (run cloned it; the exec kept us the same
	 * process): its pidfd is readable once it has exited, after every
	 * process of its pid namespace. */
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	for (int i = 6; i < argc; i++)
		remove_cgroup(argv[i]);
	if (keeper > 0)
		while (waitpid(keeper, NULL, 0) < 0 && errno == EINTR)
			;
	if (strcmp(stage2, "-"))
		umount2(stage2, MNT_DETACH);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		say("pod init killed by signal %d", WTERMSIG(status));
	return CODE_FAILURE;
}
