/*
 * pod1-waiter: the stage1's run entry point, and its lock keeper. It is
 * what rkt's stage0 execs, and so the process rkt run (or pod1 run) is,
 * holding the pod's lock through the fd stage0 left it, for the pod's
 * whole life. It is a small C program so that the process that only waits
 * does not carry a Go runtime.
 *
 * Before anything else it blocks every signal: a stop signal sent at any
 * moment from its first instruction on is read from its signalfd, never
 * lost. It starts the Go run (stage1-init, as "run") as its child, which
 * validates and sets up everything and clones the pod's PID 1 and the
 * lock keeper as children of this process (CLONE_PARENT), then reports on
 * a pipe what it made and exits. From then on this process passes each
 * stop request on to PID 1 as sigpolicy says (SIGHUP, SIGINT, SIGTERM, SIGRTMIN+4: a
 * graceful stop, sent as SIGTERM; SIGQUIT, SIGUSR1: a forced stop, sent
 * as SIGUSR1; a request only ever rises, and one that came before PID 1
 * was ready is passed on once it is), passes SIGWINCH on to PID 1 and
 * puts the caller's terminal settings back at its exit in an interactive
 * pod with a terminal (restore_tty), ignores every other signal it can,
 * reaps PID 1, empties the pod's cgroups (whatever is left in them is
 * killed; the directories stay for gc), waits for the lock keeper to have
 * committed the last statuses and let go of the lock (its done pipe),
 * undoes the shared bind of a mutable pod's app directory, and exits with
 * PID 1's code, or 254 if PID 1 was killed. If the Go run ends without a
 * report (a bad flag, a failed set-up) its code is the pod's, once every
 * child is gone.
 *
 * The report, NUL-terminated fields: PID 1's pid, the keeper's pid, the
 * bind to undo or "-", then the pod's cgroup in each hierarchy.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <elf.h>
#include <limits.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

/* The numbers and names the stage1's processes hand each other:
 * stage1-init/handover/handover.go. */
#include "handover.h"
/* The start-latency tricks by name: package starttricks. */
#include "tricks.h"

enum { LEVEL_NONE, LEVEL_STOP, LEVEL_FORCE };

/* systemd's SIGRTMIN+4 (machinectl poweroff), a graceful stop as
 * sigpolicy.SigPoweroff says: glibc's SIGRTMIN plus 4, a fixed number,
 * since musl's SIGRTMIN is another. */
#define SIG_POWEROFF 38

/* rkt's stage1 failure code. */
#define CODE_FAILURE 254

/* How long emptying the cgroups waits for what is left in them to die
 * (cgroups.RemoveTimeout). */
#define REMOVE_TIMEOUT_MS 30000

/* Lines in logx's format (package logx), as every stage1 process writes
 * them to the one stderr they share: an error is "stage1: <why>", the line
 * rkt shows; any other line says which process wrote it and its level. */
static void vline(const char *level, const char *fmt, va_list ap)
{
	char buf[512];
	int len = level ? snprintf(buf, sizeof buf, "stage1: pod1-waiter[%d] %s: ", (int)getpid(), level)
			: snprintf(buf, sizeof buf, "stage1: ");
	len += vsnprintf(buf + len, sizeof buf - len, fmt, ap);
	if (len >= (int)sizeof buf - 1)
		len = sizeof buf - 2;
	buf[len++] = '\n';
	(void)!write(2, buf, len);
}

__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vline(NULL, fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 1, 2))) static void warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vline("warning", fmt, ap);
	va_end(ap);
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

/* The start-latency tricks turned off for this pod (package starttricks):
 * a bit each, TRICK_* of tricks.h, read from TRICKS_ENV once. */
static unsigned tricks_off;

static int trick_on(int t)
{
	return !(tricks_off & (1u << t));
}

/* read_tricks reads TRICKS_ENV into tricks_off; it returns -1, having
 * said which name it does not know, if one is unknown. */
static int read_tricks(void)
{
	const char *v = getenv(TRICKS_ENV);
	while (v && *v) {
		size_t n = strcspn(v, ",");
		const char *s = v, *e = v + n;
		while (s < e && *s == ' ')
			s++;
		while (e > s && e[-1] == ' ')
			e--;
		if (e > s) {
			int t = 0;
			while (t < TRICK_COUNT && (strlen(trick_names[t]) != (size_t)(e - s) || strncmp(trick_names[t], s, e - s)))
				t++;
			if (t == TRICK_COUNT) {
				say("%s: unknown trick \"%.*s\"", TRICKS_ENV, (int)(e - s > 64 ? 64 : e - s), s);
				return -1;
			}
			tricks_off |= 1u << t;
		}
		v += n + (v[n] == ',');
	}
	return 0;
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
 * on cgroup v2 with cgroup.kill (the whole subtree at once), then each pid
 * cgroup.procs lists. It returns how many pids the list held. */
static int kill_left(int dir)
{
	int fd = openat(dir, "cgroup.kill", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		(void)!write(fd, "1", 1);
		close(fd);
	}
	fd = openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	FILE *f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return 0;
	}
	int n = 0;
	long pid;
	while (fscanf(f, "%ld", &pid) == 1)
		if (pid > 0) {
			n++;
			kill((pid_t)pid, SIGKILL);
		}
	fclose(f);
	return n;
}

/* dir_stream opens a directory stream on a copy of the open directory dir
 * (which stays open), or returns NULL. */
static DIR *dir_stream(int dir)
{
	int fd = dup(dir);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d && fd >= 0)
		close(fd);
	return d;
}

/* drain_tree kills what is left in the cgroup name in parent and in
 * everything below it; it returns how many processes it found (0: the
 * tree is empty). The directories stay. */
static int drain_tree(int parent, const char *name, int depth)
{
	if (depth > 64)
		return 0;
	int dir = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0)
		return 0;
	int n = kill_left(dir);
	DIR *d = dir_stream(dir);
	if (!d) {
		close(dir);
		return n;
	}
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_type == DT_DIR && strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n += drain_tree(dir, e->d_name, depth + 1);
	closedir(d);
	close(dir);
	return n;
}

/* lists_process reports whether the cgroup directory dir (an open
 * directory) lists a process in its cgroup.procs; a list that cannot be
 * read counts as one. */
static int lists_process(int dir)
{
	int fd = openat(dir, "cgroup.procs", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	char buf[64];
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) < 0 && errno == EINTR)
		;
	close(fd);
	return n != 0;
}

/* populated reads the cgroup v2 directory dir's cgroup.events: 1 when a
 * process is in it or below it (the kernel keeps the count for the whole
 * subtree), 0 when none is, -1 when there is no such file (cgroup v1).
 * A file that cannot be read or parsed counts as populated. */
static int populated(int dir)
{
	int fd = openat(dir, "cgroup.events", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -1 : 1;
	char buf[256];
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf - 1)) < 0 && errno == EINTR)
		;
	close(fd);
	if (n <= 0)
		return 1;
	buf[n] = 0;
	const char *p = strstr(buf, "populated ");
	return !p || p[strlen("populated ")] != '0';
}

/* leaf_busy reports whether the cgroup directory name in dir, which the
 * caller found to have no subdirectory, lists a process: its cgroup.procs
 * is read by path, without opening the directory. */
static int leaf_busy(int dir, const char *name)
{
	char path[NAME_MAX + sizeof "/cgroup.procs"];
	if ((size_t)snprintf(path, sizeof path, "%s/cgroup.procs", name) >= sizeof path)
		return 1;
	int fd = openat(dir, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		/* Gone is empty. */
		return errno != ENOENT;
	char buf[64];
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) < 0 && errno == EINTR)
		;
	close(fd);
	return n != 0;
}

/* tree_busy reports whether the cgroup name in parent or anything below
 * it holds a process, reading only: on cgroup v2 its cgroup.events, on v1
 * each directory's cgroup.procs. After every orderly end it holds none,
 * and this is all the waiter does to its cgroups.
 *
 * A cgroup file system counts a directory's subdirectories in its link
 * count (2 + subdirectories), so a directory found to have none is read
 * without being opened or listed, and a listing stops once it has found
 * them all: on a hybrid host this check is on the path of every pod's
 * end, once per v1 hierarchy. A link count that does not read so (below
 * 2) gets the whole listing. */
static int tree_busy(int parent, const char *name, int depth)
{
	if (depth > 64)
		return 0;
	int dir = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dir < 0)
		/* Gone is empty; anything else is for the drain to say. */
		return errno != ENOENT;
	/* The top directory's count covers its subtree on v2. */
	int busy = depth == 0 ? populated(dir) : -1;
	if (busy >= 0) {
		close(dir);
		return busy;
	}
	busy = lists_process(dir);
	struct stat st;
	long left = -1;
	if (!busy && !fstat(dir, &st) && st.st_nlink >= 2)
		left = (long)st.st_nlink - 2;
	char buf[4096];
	long n;
	while (!busy && left != 0 && (n = syscall(SYS_getdents64, dir, buf, sizeof buf)) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			busy = 1;
			break;
		}
		for (long off = 0; off < n && !busy && left != 0;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);
			off += e->d_reclen;
			if (e->d_type != DT_DIR || !strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
				continue;
			if (left > 0)
				left--;
			struct stat cs;
			if (fstatat(dir, e->d_name, &cs, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(cs.st_mode) && cs.st_nlink == 2)
				busy = leaf_busy(dir, e->d_name);
			else
				busy = tree_busy(dir, e->d_name, depth + 1);
		}
	}
	close(dir);
	return busy;
}

/* drain_cgroup empties the pod's cgroup at path in one hierarchy, as the
 * Go run's cgroups.Drain does: the emptied cgroups stay for gc to remove
 * (the gc entry point, rkt gc, rkt rm), as rkt's stage1 leaves its pod's,
 * but nothing of the pod may outlive the lock. PID 1 has been reaped, so
 * after every orderly end the tree is already empty and this only reads
 * (tree_busy); what a killed PID 1 left is killed. */
static void drain_cgroup(const char *path)
{
	char *slash = strrchr(path, '/');
	if (path[0] != '/' || !slash || !slash[1]) {
		warn("cgroup %s: not an absolute path", path);
		return;
	}
	/* After every orderly end nothing is left: reading is enough. */
	if (!tree_busy(AT_FDCWD, path, 0))
		return;
	char parent_path[4096];
	size_t n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= sizeof parent_path)
		return;
	memcpy(parent_path, path, n);
	parent_path[n] = 0;
	int parent = open(parent_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (parent < 0) {
		warn("empty cgroups: %s: %s", path, strerror(errno));
		return;
	}
	long deadline = now_ms() + REMOVE_TIMEOUT_MS;
	while (drain_tree(parent, slash + 1, 0)) {
		if (now_ms() > deadline) {
			warn("empty cgroups: processes left in %s after 30s", path);
			break;
		}
		msleep(2);
	}
	close(parent);
}

/* The name the Go run dispatches on, and the variable naming the report
 * pipe's fd in its environment. */
#define GO_RUN_ROLE POD1_ROLE_RUN
#define REPORT_ENV POD1_WAITER_ENV
#define GO_BINARY POD1_STAGE1_BINARY

/* go_path finds the Go stage1 binary next to ours. It is run by path, as
 * stage0 runs us: it is a host process, outside the pod, and makes the
 * read-only copies of itself that PID 1 and the lock keeper run from. */
static int go_path(char *path, size_t size)
{
	ssize_t n = readlink("/proc/self/exe", path, size - sizeof GO_BINARY - 1);
	if (n <= 0)
		return -1;
	path[n] = 0;
	char *slash = strrchr(path, '/');
	if (!slash)
		return -1;
	strcpy(slash + 1, GO_BINARY);
	return 0;
}

/* start_go starts the Go run as our child with argv (our own, argv[0]
 * replaced), the signal mask we were started with, and the write ends of
 * the report pipe and of the keeper's done pipe (not close-on-exec; the Go
 * run marks every fd above stderr close-on-exec first thing, and hands the
 * done pipe's to the lock keeper). It returns its pid, or -1.
 *
 * posix_spawn, not fork: it clones with CLONE_VM|CLONE_VFORK, so our page
 * tables are neither copied for a child that only execs nor torn down in
 * it, and no page of ours is copied on write after it; on this start
 * path each of those is a cost paid before the Go run even starts. */
static pid_t start_go(char **argv, const sigset_t *mask, int report, int done)
{
	char path[4096], env[64];
	if (go_path(path, sizeof path)) {
		say("stage1 binary %s: %s", GO_BINARY, strerror(errno));
		return -1;
	}
	/* Our pid too: the Go run checks that we are its parent (not
	 * already dead) and watches us through a pidfd. Set in our own
	 * environment, which nothing else of ours reads. */
	snprintf(env, sizeof env, "%d,%d,%d", report, (int)getpid(), done);
	if (setenv(REPORT_ENV, env, 1)) {
		say("environment: %s", strerror(errno));
		return -1;
	}
	posix_spawnattr_t attr;
	int err = posix_spawnattr_init(&attr);
	/* Terminal signals (Ctrl-C) reach us alone, and are passed on once,
	 * as every other stop request: the Go run gets a process group of
	 * its own. */
	if (!err)
		err = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
	if (!err)
		err = posix_spawnattr_setpgroup(&attr, 0);
	if (!err)
		err = posix_spawnattr_setsigmask(&attr, mask);
	argv[0] = GO_RUN_ROLE;
	pid_t pid = -1;
	extern char **environ;
	if (!err)
		err = posix_spawn(&pid, path, NULL, &attr, argv, environ);
	posix_spawnattr_destroy(&attr);
	if (err) {
		say("exec %s: %s", GO_BINARY, strerror(err));
		return -1;
	}
	return pid;
}

/* read_small reads the whole of a small /proc file into buf (NUL-ended),
 * and returns its length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t got = 0;
	for (;;) {
		ssize_t n = read(fd, buf + got, size - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += n;
		if (got == size - 1)
			break;
	}
	close(fd);
	buf[got] = 0;
	return got;
}

/* Priming the kernel's cgroup move path for the pod's moves (PID 1 into
 * its cgroup, each app into its own). Every write to a cgroup.procs takes
 * the writer's side of the kernel's global cgroup_threadgroup_rwsem,
 * which first waits for an RCU grace period (rcu_sync_enter), unless
 * another writer was there within about a grace period before (or
 * favordynmods is set on the cgroup2 mount); the moves hold cgroup_mutex
 * during that wait as this write does, so priming adds no waiting, it
 * moves it earlier (docs/design-start.md). Made here, as soon as the Go
 * run is started, the wait overlaps the Go run's start and its checks of
 * the pod. The kernel keeps the path quick for about one grace period
 * after each such write, so it is repeated every PRIME_EVERY_MS until the
 * Go run reports: every move of the start (PID 1's, the first app's) is
 * then quick, however long the steps between them take. Stop requests
 * meanwhile wait in the signalfd. A host without cgroup v2, or anything
 * unexpected, leaves the wait to the pod's moves, as before.
 *
 * What is written must move nothing: the Go run moves us (cgroups'
 * OwnLeaf), and so may a manager, at any moment. A write of "0" (us) to
 * the cgroup we were in an instant before would undo such a move. So the
 * write names a zombie child of ours, which the kernel finds (the lock is
 * taken once the pid is found: a pid nobody has takes nothing) and does
 * not move (an exiting task is left where it is); it is reaped only once
 * priming ends, so its pid cannot name anyone else meanwhile. */
static int prime_fd = -1;
static pid_t prime_zombie = -1;
static char prime_pid[16];

/* prime writes the zombie's pid to the cgroup.procs prime_fd holds open.
 * It returns 0 once written. */
static int prime(void)
{
	size_t n = strlen(prime_pid);
	return write(prime_fd, prime_pid, n) == (ssize_t)n ? 0 : -1;
}

/* prime_end reaps the zombie and closes what priming holds. */
static void prime_end(void)
{
	if (prime_zombie > 0)
		while (waitpid(prime_zombie, NULL, 0) < 0 && errno == EINTR)
			;
	prime_zombie = -1;
	if (prime_fd >= 0)
		close(prime_fd);
	prime_fd = -1;
}

/* prime_open opens, once, the cgroup.procs of the cgroup v2 group we are
 * in, under mount. */
static int prime_open(const char *mount)
{
	static char cg[4096];
	char path[sizeof cg + 2048 + 32];
	if (read_small("/proc/self/cgroup", cg, sizeof cg) <= 0)
		return -1;
	char *rel = NULL;
	for (char *l = cg; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (!strncmp(l, "0::", 3)) {
			rel = l + 3;
			break;
		}
	}
	if (!rel || *rel != '/')
		return -1;
	rel[strcspn(rel, "\n")] = 0;
	snprintf(path, sizeof path, "%s%s/cgroup.procs", mount, strcmp(rel, "/") ? rel : "");
	prime_fd = open(path, O_WRONLY | O_CLOEXEC);
	return prime_fd < 0 ? -1 : 0;
}

/* prime_cgroups finds the cgroup2 mount (the first, mounted from the
 * hierarchy's root), makes the zombie and primes: 0 once it has. */
static int prime_cgroups(void)
{
	static char mi[65536];
	static char mount[2048];
	if (read_small("/proc/self/mountinfo", mi, sizeof mi) <= 0)
		return -1;
	int found = 0;
	/* mountinfo: id parent major:minor root mount-point options... - type source super-options */
	for (char *l = mi; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		char *end = strchr(l, '\n');
		if (end)
			*end = 0;
		char root[256];
		if (strstr(l, " - cgroup2 ") &&
		    sscanf(l, "%*s %*s %*s %255s %2047s", root, mount) == 2 && !strcmp(root, "/") &&
		    !strchr(mount, '\\')) {
			found = 1;
			break;
		}
		if (end)
			*end = '\n';
	}
	if (!found || prime_open(mount) < 0)
		return -1;
	prime_zombie = fork();
	if (prime_zombie == 0)
		_exit(0);
	siginfo_t si;
	if (prime_zombie < 0 ||
	    waitid(P_PID, (id_t)prime_zombie, &si, WEXITED | WNOWAIT) < 0 ||
	    snprintf(prime_pid, sizeof prime_pid, "%d", (int)prime_zombie) <= 0 || prime() < 0) {
		prime_end();
		return -1;
	}
	return 0;
}

/* The repeat: cgroup_threadgroup_rwsem's writers' mode lasts about one
 * grace period after a write (12-20 ms measured here). */
#define PRIME_EVERY_MS 3

/* The caller's terminal, for an interactive pod whose stdin is one
 * (stage1-init console.go): PID 1 makes it raw while the app has a
 * terminal of its own joined to it. We hold it too and outlive PID 1, so we
 * put its settings back as we found them when we exit, however PID 1 and
 * the app ended; and we are in its foreground process group, where its
 * window size changes (SIGWINCH) arrive, which we pass on to PID 1. */
static struct termios saved_tty;
static int winch_pending;

static void restore_tty(void)
{
	tcsetattr(0, TCSANOW, &saved_tty);
}

/* interactive reports whether the stage1's flags (those before the pod's
 * uuid, as Go's flag package parses them: the last one counts) turn
 * --interactive on. */
static int interactive(int argc, char **argv)
{
	int on = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] != '-' || !strcmp(a, "--"))
			break;
		a += a[1] == '-' ? 2 : 1;
		if (!strcmp(a, "interactive"))
			on = 1;
		else if (!strncmp(a, "interactive=", 12)) {
			const char *v = a + 12;
			on = !strcmp(v, "1") || !strcmp(v, "t") || !strcmp(v, "T") || !strcmp(v, "true") ||
			     !strcmp(v, "TRUE") || !strcmp(v, "True");
		}
	}
	return on;
}

/* Socket activation (package sockact): systemd passes rkt run its
 * sockets at fds 3.., LISTEN_FDS of them, with LISTEN_PID our pid (stage0
 * exec'd us). They reach the Go run, our child, as we got them, and it
 * checks them and hands each to PID 1 for the app it is for. We keep no
 * copy once it has reported: a socket held here would outlive the app's
 * last run. Only the fds open before we made any of our own are ours to
 * close, and only sockets among them (the Go run refused anything else). */
#define MAX_LISTEN 256 /* sockact.MaxSockets */
static int listen_n;
static unsigned char listen_open[MAX_LISTEN];

static void note_listen_fds(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	char *end;
	if (!pid || !fds || !*pid || !*fds)
		return;
	long p = strtol(pid, &end, 10);
	if (*end || p != (long)getpid())
		return;
	long n = strtol(fds, &end, 10);
	if (*end || n <= 0)
		return;
	listen_n = n < MAX_LISTEN ? (int)n : MAX_LISTEN;
	for (int i = 0; i < listen_n; i++)
		listen_open[i] = fcntl(3 + i, F_GETFD) >= 0;
}

static void close_listen_fds(void)
{
	struct stat st;
	for (int i = 0; i < listen_n; i++)
		if (listen_open[i] && !fstat(3 + i, &st) && S_ISSOCK(st.st_mode))
			close(3 + i);
}

static void forward(int pidfd, long level)
{
	if (pidfd >= 0 && level > LEVEL_NONE)
		syscall(SYS_pidfd_send_signal, pidfd, level == LEVEL_FORCE ? SIGUSR1 : SIGTERM, NULL, 0);
}

/* read_requests reads the stop signals that came, raises level, and
 * passes each on to PID 1 (pidfd; -1 while it is not ready). A repeated
 * request is passed on again, as run did: it changes nothing in PID 1. */
static void read_requests(int sfd, long *level, int pidfd)
{
	struct signalfd_siginfo si[8];
	ssize_t n = read(sfd, si, sizeof si);
	for (ssize_t i = 0; i < n / (ssize_t)sizeof si[0]; i++) {
		int s = si[i].ssi_signo;
		if (s == SIGWINCH) {
			if (pidfd >= 0)
				syscall(SYS_pidfd_send_signal, pidfd, SIGWINCH, NULL, 0);
			else
				winch_pending = 1;
			continue;
		}
		long want = s == SIGQUIT || s == SIGUSR1 ? LEVEL_FORCE : LEVEL_STOP;
		if (want > *level)
			*level = want;
		forward(pidfd, *level);
	}
}

static int code_of(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return CODE_FAILURE;
}

/* shed drops our binary's mapped pages from our page tables once we only
 * wait (stage1-init/pid1's shedUnusedMemory does the same for the Go
 * processes): they stay in the page cache, and the few the waiting code
 * uses fault back in. Every loadable segment that is never written is
 * dropped, code and constants (static glibc's are most of what a waiter
 * keeps resident); a writable one is not: MADV_DONTNEED would throw away
 * its modified pages (the relocated RELRO part among them). */
struct shed_ranges {
	int n;
	uintptr_t lo[8], hi[8];
};

static int shed_segment(struct dl_phdr_info *info, size_t size, void *data)
{
	struct shed_ranges *r = data;
	long page = sysconf(_SC_PAGESIZE);
	(void)size;
	for (int i = 0; i < info->dlpi_phnum && r->n < 8; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W))
			continue;
		r->lo[r->n] = (info->dlpi_addr + ph->p_vaddr) & ~(uintptr_t)(page - 1);
		r->hi[r->n] = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + page - 1) & ~(uintptr_t)(page - 1);
		r->n++;
	}
	return 1; /* our own binary only: it comes first */
}

/* The ranges are found first and dropped last, in a loop that runs
 * nothing else: code run after the madvise calls is faulted back in, 64
 * KiB around each page (the kernel's fault-around). */
static void shed(void)
{
	struct shed_ranges r = {0};
	dl_iterate_phdr(shed_segment, &r);
	for (int i = 0; i < r.n; i++)
		syscall(SYS_madvise, r.lo[i], r.hi[i] - r.lo[i], MADV_DONTNEED);
}

/* The lock keeper (stage1-init/podstart/lockkeeper.go starts it, and says why it
 * exists): holds the pod's lock on fd 3 (an fd of the pod directory) until
 * the pidfd on fd 4 says PID 1 has exited. It commits the final statuses
 * PID 1 leaves pending (status.WritePending) of the apps PID 1 names on the
 * commit pipe (fd 5), a line each, as it reads them, and what is left in
 * the pipe once PID 1 is gone: a status is durable before the lock is
 * released. Nothing else in the status directory is committed, and no
 * commit replaces a final status in place. Then it closes the lock and
 * tells the waiter on its done pipe (fd 6), and exits after the waiter
 * (done_with_lock). argv[1] is the status directory, below the pod
 * directory. */
#define KEEPER_ROLE POD1_ROLE_KEEPER
#define PENDING_SUFFIX ".commit"
/* status.MaxPending: the names taken from PID 1 in the pod's life. */
#define MAX_PENDING 1024
/* The longest app name whose pending name is a file name. */
#define MAX_PENDING_APP (NAME_MAX - (sizeof PENDING_SUFFIX - 1))
/* The longest status (status.maxStatusLen), its newline included. */
#define MAX_STATUS_LEN (sizeof "-2147483648\n" - 1)

#ifndef RESOLVE_NO_MAGICLINKS
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_NO_SYMLINKS 0x04
#define RESOLVE_BENEATH 0x08
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif

struct keeper_open_how {
	uint64_t flags, mode, resolve;
};

/* pending_app reports whether the n bytes at s are an app name PID 1 may
 * send: an ACName (lower-case letters and digits, in groups joined by
 * single dashes) of at most MAX_PENDING_APP bytes (status.PendingApp). */
static int pending_app(const char *s, size_t n)
{
	if (n == 0 || n > MAX_PENDING_APP || s[0] == '-' || s[n - 1] == '-')
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c == '-' && s[i - 1] != '-')))
			return 0;
	}
	return 1;
}

/* is_pending says whether st is what WritePending leaves: a regular file
 * of one link, no longer than a status. */
static int is_pending(const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_nlink == 1 && st->st_size <= (off_t)MAX_STATUS_LEN;
}

/* sync_pending fsyncs the pending status name in dir: what is not one
 * (planted) is refused before it is opened, since opening a device may act
 * on it, and after, in case it was swapped in between; one too long is
 * never read. */
static int sync_pending(int dir, const char *name)
{
	struct stat st, st2;
	if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) || !is_pending(&st))
		return -1;
	int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int ok = !fstat(fd, &st2) && is_pending(&st2) && st2.st_ino == st.st_ino && st2.st_dev == st.st_dev &&
		 !fsync(fd);
	close(fd);
	return ok ? 0 : -1;
}

/* move_no_replace renames from to to in dir unless to exists; a file
 * system without RENAME_NOREPLACE gets a hard link, which fails on an
 * existing name too, and the unlink of from. */
static int move_no_replace(int dir, const char *from, const char *to)
{
	if (!syscall(SYS_renameat2, dir, from, dir, to, RENAME_NOREPLACE))
		return 0;
	if (errno != EINVAL || linkat(dir, from, dir, to, 0))
		return -1;
	return unlinkat(dir, from, 0);
}

/* What the keeper read of the commit pipe: the line a read cut, whether
 * it is too long to be a name, the names taken, whether a dropped line
 * was told, and whether the pipe may bring more. */
static struct {
	char line[MAX_PENDING_APP + 1];
	size_t len;
	int long_line, taken, warned, open;
} sent = { .open = 1 };

/* open_status_dir opens the status directory rel below the pod directory
 * on fd 3, without following a symlink; -1 if there is none. */
static int open_status_dir(const char *rel)
{
	if (!rel)
		return -1;
	struct keeper_open_how how = {
		.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int dir = syscall(SYS_openat2, POD1_KEEPER_LOCK_FD, rel, &how, sizeof how);
	if (dir < 0 && errno != ENOENT)
		warn("lock keeper: status directory: %s", strerror(errno));
	return dir;
}

/* commit_app makes app's pending status durable and visible: fsynced,
 * then renamed to the app's name. The directory (*dir, opened at the
 * first name; -2 until then) is fsynced by the caller. 1 if it moved. */
static int commit_app(int *dir, const char *rel, const char *app)
{
	if (*dir == -2)
		*dir = open_status_dir(rel);
	if (*dir < 0)
		return 0;
	char name[NAME_MAX + 1];
	snprintf(name, sizeof name, "%s" PENDING_SUFFIX, app);
	if (sync_pending(*dir, name)) {
		warn("lock keeper: commit %s: not a pending status, or not synced", name);
		return 0;
	}
	if (move_no_replace(*dir, name, app)) {
		warn("lock keeper: commit status of %s: %s", app,
		     errno == EEXIST ? "a final status is already in place" : strerror(errno));
		return 0;
	}
	return 1;
}

/* commit_sent reads what the commit pipe holds and commits the apps it
 * names, then fsyncs the status directory (rel, below the pod directory
 * on fd 3). The pipe is read until it is empty, and no more once it is at
 * its end or MAX_PENDING names were taken. The bytes are read straight
 * into a static buffer (no stream, no allocation): this runs on the path
 * from PID 1's last status to the lock's release, in a process that has
 * shed its pages. */
static void commit_sent(const char *rel)
{
	static char buf[4096];
	int dir = -2, moved = 0, dropped = 0;
	while (sent.open && sent.taken < MAX_PENDING) {
		ssize_t got = read(POD1_KEEPER_COMMIT_FD, buf, sizeof buf);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			/* Empty for now; at its end, or broken, for good. */
			sent.open = got < 0 && errno == EAGAIN;
			break;
		}
		for (ssize_t i = 0; i < got; i++) {
			if (buf[i] != POD1_COMMIT_LINE_END) {
				if (!sent.long_line && sent.len < MAX_PENDING_APP)
					sent.line[sent.len++] = buf[i];
				else
					sent.long_line = 1;
				continue;
			}
			sent.line[sent.len] = 0;
			if (sent.long_line || !pending_app(sent.line, sent.len) || sent.taken >= MAX_PENDING) {
				dropped++;
			} else {
				sent.taken++;
				moved += commit_app(&dir, rel, sent.line);
			}
			sent.len = 0;
			sent.long_line = 0;
		}
	}
	if (sent.taken >= MAX_PENDING)
		sent.open = 0;
	if (dropped && !sent.warned) {
		sent.warned = 1;
		warn("lock keeper: commit pipe: a line that names no app, or past the names taken, dropped");
	}
	if (moved && fsync(dir))
		warn("lock keeper: commit statuses: fsync directory: %s", strerror(errno));
	if (dir >= 0)
		close(dir);
}

/* done_with_lock lets go of our copy of the pod's lock (the waiter holds
 * the same open file, so the lock stays held until it exits), then writes
 * a byte on the done pipe (fd 6; the waiter holds its read end): every
 * status is committed, and the waiter's exit alone holds the lock now.
 *
 * What we do after that byte is no one's business, and must not be in the
 * way of the pod's end: we first make ourselves SCHED_IDLE, so that the
 * waiter, woken by the byte, and whoever its exit wakes (rkt run's caller)
 * take the CPU from us at once (a pipe's wake-up is a "sync" one, which
 * may queue the woken task on the waker's CPU, behind the waker), and we
 * exit only once the waiter has (its end of the pipe closed), not during
 * its end: traced, our exit there delayed the waiter by 0.3 ms. Without a
 * done pipe or with the waiter gone (EPIPE), we exit at once. */
static void done_with_lock(void)
{
	close(POD1_KEEPER_LOCK_FD);
	struct stat st;
	if (fstat(POD1_KEEPER_DONE_FD, &st))
		return;
	struct sched_param idle = { 0 };
	/* musl's sched_setscheduler is a stub (ENOSYS): the system call. */
	syscall(SYS_sched_setscheduler, 0, SCHED_IDLE, &idle);
	if (write(POD1_KEEPER_DONE_FD, "", 1) != 1)
		return;
	struct pollfd p = { .fd = POD1_KEEPER_DONE_FD, .events = 0 };
	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
}

static int keeper_main(const char *status_dir)
{
	/* A write on a pipe whose reader is gone fails, it does not kill. */
	ignore(SIGPIPE);
	/* The Go run gives us its checked set, and nothing else, as our
	 * environment; a name we did not know would only keep a trick on. */
	if (read_tricks())
		tricks_off = 0;
	if (trick_on(TRICK_SHED))
		shed();
	struct stat st;
	struct pollfd p[2] = { { .fd = POD1_KEEPER_PID1_FD, .events = POLLIN }, { .fd = POD1_KEEPER_COMMIT_FD, .events = POLLIN } };
	int flags = fcntl(POD1_KEEPER_COMMIT_FD, F_GETFL);
	/* No commit pipe: PID 1 commits its statuses. */
	if (fstat(POD1_KEEPER_COMMIT_FD, &st) || flags < 0 || fcntl(POD1_KEEPER_COMMIT_FD, F_SETFL, flags | O_NONBLOCK))
		sent.open = 0;
	for (;;) {
		if (poll(p, sent.open ? 2 : 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			say("lock keeper: %s", strerror(errno));
			commit_sent(status_dir);
			done_with_lock();
			return 1;
		}
		if (p[0].revents) {
			commit_sent(status_dir);
			done_with_lock();
			return 0;
		}
		/* Read to its end, or PID 1 closed its end (it is ending):
		 * either way only its exit may be left. */
		if (sent.open && p[1].revents)
			commit_sent(status_dir);
	}
}

int main(int argc, char **argv)
{
	const char *base = strrchr(argv[0], '/');
	if (!strcmp(base ? base + 1 : argv[0], KEEPER_ROLE)) {
		/* Run by its path in /proc/self/fd, it would be named after
		 * the fd's number in ps, top and pgrep. */
		prctl(PR_SET_NAME, KEEPER_ROLE);
		/* Without its argument it still holds the lock: releasing
		 * it early would be the worse failure. */
		if (argc < 2)
			say("lock keeper: no status directory: PID 1's pending statuses stay pending");
		return keeper_main(argc < 2 ? NULL : argv[1]);
	}
	/* First thing: every signal blocked. The stop signals stay so, and
	 * the signalfd reads them; the others are unblocked once their
	 * disposition is set. */
	sigset_t all, start_mask, stops;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &start_mask);
	sigemptyset(&stops);
	sigaddset(&stops, SIGHUP);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	sigaddset(&stops, SIG_POWEROFF);
	sigaddset(&stops, SIGQUIT);
	sigaddset(&stops, SIGUSR1);
	/* Before we open anything. */
	note_listen_fds();
	if (interactive(argc, argv) && tcgetattr(0, &saved_tty) == 0) {
		atexit(restore_tty);
		sigaddset(&stops, SIGWINCH);
	}
	int sfd = signalfd(-1, &stops, SFD_CLOEXEC);
	/* Every other signal is ignored, as sigpolicy says run ignores it;
	 * SIGCHLD keeps its default, which leaves our children to wait. */
	for (int s = 1; s <= 64; s++)
		if (!sigismember(&stops, s) && s != SIGKILL && s != SIGSTOP && s != SIGCHLD)
			ignore(s);
	sigprocmask(SIG_SETMASK, &stops, NULL);
	if (sfd < 0) {
		say("signalfd: %s", strerror(errno));
		return CODE_FAILURE;
	}
	/* Bad input, before anything starts. */
	if (read_tricks())
		return CODE_FAILURE;

	/* The write ends are the Go run's, inherited through its exec: the
	 * report's, and the done pipe's, which it hands to the lock keeper
	 * (its fd 6). The keeper closes it once it has made the last
	 * statuses durable and let go of the lock, so that the end of the
	 * pod waits for that, not for the keeper's whole exit. */
	int rp[2], dp[2];
	if (pipe2(rp, 0) || fcntl(rp[0], F_SETFD, FD_CLOEXEC) || pipe2(dp, 0) || fcntl(dp[0], F_SETFD, FD_CLOEXEC)) {
		say("report pipe: %s", strerror(errno));
		return CODE_FAILURE;
	}
	pid_t run = start_go(argv, &start_mask, rp[1], dp[1]);
	close(rp[1]);
	close(dp[1]);
	if (run < 0)
		return CODE_FAILURE;
	int primed = trick_on(TRICK_PRIME) && prime_cgroups() == 0;

	/* The report: read until the Go run closes it (it exits right after
	 * writing it, or fails without). Stop requests meanwhile raise the
	 * level, passed on once PID 1 is known. */
	static char report[65536];
	size_t got = 0;
	long level = LEVEL_NONE;
	struct pollfd pf[2] = { { .fd = sfd, .events = POLLIN }, { .fd = rp[0], .events = POLLIN } };
	for (;;) {
		int ready = poll(pf, 2, primed ? PRIME_EVERY_MS : -1);
		if (ready < 0) {
			if (errno == EINTR)
				continue;
			say("poll: %s", strerror(errno));
			break;
		}
		if (ready == 0) {
			(void)prime();
			continue;
		}
		if (pf[0].revents & POLLIN)
			read_requests(sfd, &level, -1);
		if (pf[1].revents & (POLLIN | POLLHUP)) {
			ssize_t n = read(rp[0], report + got, sizeof report - 1 - got);
			if (n > 0) {
				got += n;
				continue;
			}
			if (n < 0 && errno == EINTR)
				continue;
			break;
		}
	}
	close(rp[0]);
	prime_end();
	int status = 0;
	while (waitpid(run, &status, 0) < 0 && errno == EINTR)
		;
	/* Split the report into its fields. */
	char *field[1024];
	int nf = 0;
	for (size_t i = 0; i < got && nf < 1024;) {
		field[nf++] = report + i;
		while (i < got && report[i])
			i++;
		i++;
	}
	if (nf < POD1_REPORT_FIRST_CGROUP || got == 0 || report[got - 1] != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		/* The Go run failed (it said why) or was killed: whatever
		 * it started (PID 1, the keeper) is our child and it has
		 * ended it; wait for them all, then fail as it did. A
		 * keeper waits for the done pipe's read end to close. */
		close(dp[0]);
		while (wait(NULL) > 0 || errno == EINTR)
			;
		if (WIFSIGNALED(status))
			return 128 + WTERMSIG(status);
		return code_of(status);
	}
	pid_t pid = (pid_t)number(field[POD1_REPORT_PID1], "PID");
	/* The keeper's pid: checked, not needed (the done pipe says it all). */
	(void)number(field[POD1_REPORT_KEEPER], "KEEPER");
	close_listen_fds();
	const char *stage2 = field[POD1_REPORT_STAGE2];
	/* PID 1 is our child and not yet waited for: its pid names it. */
	int pidfd = syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0) {
		warn("pidfd of PID 1: %s", strerror(errno));
		kill(pid, SIGUSR1);
	}
	forward(pidfd, level);
	if (winch_pending && pidfd >= 0)
		syscall(SYS_pidfd_send_signal, pidfd, SIGWINCH, NULL, 0);
	if (trick_on(TRICK_SHED))
		shed();
	struct pollfd fds[2] = { { .fd = sfd, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
	while (pidfd >= 0) {
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (fds[0].revents & POLLIN)
			read_requests(sfd, &level, pidfd);
		/* Readable once PID 1 has exited, after every process of its
		 * pid namespace. */
		if (fds[1].revents & (POLLIN | POLLHUP))
			break;
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	for (int i = POD1_REPORT_FIRST_CGROUP; i < nf; i++)
		drain_cgroup(field[i]);
	/* The keeper has done its part once it writes a byte on the done
	 * pipe, after its last commit and after closing its copy of the
	 * lock; or once no one holds the pipe's write end (it died). It
	 * then waits for our exit to close the read end, and exits after
	 * us: nothing of the pod's outcome waits for its exit, and it is no
	 * process of the pod (whoever reaps our orphans reaps it). */
	struct pollfd done = { .fd = dp[0], .events = POLLIN };
	while (poll(&done, 1, -1) < 0 && errno == EINTR)
		;
	if (strcmp(stage2, POD1_REPORT_NO_BIND))
		umount2(stage2, MNT_DETACH);
	if (WIFSIGNALED(status))
		say("pod init killed by signal %d", WTERMSIG(status));
	return code_of(status);
}
