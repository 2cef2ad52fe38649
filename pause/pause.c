/*
 * pod1-pause: the init of the apps' pid namespace (threats T24).
 *
 * The apps of a pod share one pid namespace, as in rkt. The stage1's own
 * processes (PID 1, the apps' set-up processes, the entry points) live in
 * the namespace above it: an app cannot name them, so it can neither
 * signal, ptrace nor open /proc/PID/... of any of them, whatever
 * capabilities it holds. Something must be the init of the apps'
 * namespace, which reaps the processes orphaned there and whose end
 * ends the namespace: this program, Kubernetes' pause in spirit. It
 * holds nothing an app lacks: no capability (its bounding set, the apps',
 * is a ceiling it cannot use), no descriptor, no_new_privs,
 * an empty read-only root in a mount namespace of its own. An app that
 * takes it over gains nothing; one that stops it is one that could kill
 * its siblings anyway.
 *
 * PID 1 clones it with CLONE_NEWPID, in PID 1's mount namespace, with a
 * socket on fd 3. Its first job is the one thing only a member of the
 * namespace can do: make procfs instances of it. It sends PID 1 two
 * detached procfs mounts of the apps' namespace (one for the set-up
 * process started ahead of the pod's configuration, one PID 1 keeps in
 * its own root for every later app) and the namespace itself, with one
 * byte, on fd 3. Then it leaves everything behind but the pod's cgroups,
 * which PID 1 hands it read-only (take_trees), and reaps. It installs
 * no signal handler and blocks only SIGCHLD, which it waits for: the
 * kernel drops every other signal sent to a namespace's init that has no
 * handler for it, from inside the namespace (a queued "fault" signal
 * included) and from above it (but SIGKILL and SIGSTOP), before it is
 * queued. A blocked signal would be queued instead, and a flood of
 * queued real-time ones would use up the pending-signal allowance of the
 * host's root.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The numbers the stage1's processes hand each other:
 * stage1-init/handover/handover.go. */
#include "../waiter/handover.h"

#ifndef SYS_fsopen
#define SYS_fsopen 430
#endif
#ifndef SYS_fsconfig
#define SYS_fsconfig 431
#endif
#ifndef SYS_fsmount
#define SYS_fsmount 432
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#define MOVE_MOUNT_F_EMPTY_PATH_ 0x4
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
/* linux/securebits.h: NOROOT, NO_SETUID_FIXUP, KEEP_CAPS (off) and
 * NO_CAP_AMBIENT_RAISE, each locked. */
#define SECBITS_LOCKED_DOWN 0xef
/* capset's arguments (linux/capability.h, which musl does not ship). */
#define CAP_VERSION_3 0x20080522
struct cap_header {
	unsigned int version;
	int pid;
};
struct cap_data {
	unsigned int effective, permitted, inheritable;
};
#define FSOPEN_CLOEXEC_ 0x1
#define FSCONFIG_CMD_CREATE_ 6
#define FSMOUNT_CLOEXEC_ 0x1
#define MOUNT_ATTR_NOSUID_ 0x2
#define MOUNT_ATTR_NODEV_ 0x4
#define MOUNT_ATTR_NOEXEC_ 0x8

/* The socket PID 1 reads the procfs mounts from. */
#define REPORT_FD POD1_PAUSE_SOCK_FD
/* How many procfs instances PID 1 is sent. */
#define PROCFS_COUNT 2
/* Where the empty root is made; every host has it. */
#define EMPTY_ROOT "/dev"

static int fail(const char *what)
{
	fprintf(stderr, "stage1: pod1-pause: %s: %s\n", what, strerror(errno));
	return 254;
}

/* procfs makes a detached procfs instance of our pid namespace. */
static int procfs(void)
{
	int fs = syscall(SYS_fsopen, "proc", FSOPEN_CLOEXEC_);
	if (fs < 0)
		return -1;
	int mnt = -1;
	if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE_, NULL, NULL, 0) == 0)
		mnt = syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC_,
			      MOUNT_ATTR_NOSUID_ | MOUNT_ATTR_NODEV_ | MOUNT_ATTR_NOEXEC_);
	int saved = errno;
	close(fs);
	errno = saved;
	return mnt;
}

/* send_fds sends PID 1 one byte, what, with n descriptors, on fd 3, and
 * closes them. */
static int send_fds(char what, int *fds, int n)
{
	struct iovec iov = {.iov_base = &what, .iov_len = 1};
	union {
		char buf[CMSG_SPACE((PROCFS_COUNT + 1) * sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = CMSG_SPACE(n * sizeof(int))};
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(n * sizeof(int));
	memcpy(CMSG_DATA(c), fds, n * sizeof(int));
	ssize_t r;
	do
		r = sendmsg(REPORT_FD, &msg, MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return r == 1 ? 0 : -1;
}

static int send_procfs(void)
{
	int fds[PROCFS_COUNT + 1];
	for (int i = 0; i < PROCFS_COUNT; i++)
		if ((fds[i] = procfs()) < 0)
			return -1;
	/* The namespace itself, for setns: only a process that may ptrace
	 * us could open it later, and after this nothing may. */
	if ((fds[PROCFS_COUNT] = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	return send_fds('p', fds, PROCFS_COUNT + 1);
}

/* cgroupns is pod1-cgroupns (POD1_ROLE_CGROUP_NS): born in the apps' cgroup
 * (PID 1 clones it there), it makes a cgroup namespace rooted at that
 * cgroup, which is what a namespace's root is, and sends it to PID 1.
 * Only a process in a cgroup can root a namespace there, and on cgroup v2
 * a cgroup that hands controllers down to its children holds no process:
 * PID 1 hands them down once this one is gone. */
static int cgroupns(void)
{
	if (unshare(CLONE_NEWCGROUP) < 0)
		return fail("unshare cgroup namespace");
	int fd = open("/proc/self/ns/cgroup", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("open the cgroup namespace");
	if (send_fds('c', &fd, 1) < 0)
		return fail("send the cgroup namespace");
	return 0;
}

/* mkdirs makes every directory of path (absolute) that is missing. */
static int mkdirs(char *path)
{
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		int r = mkdir(path, 0555);
		*p = '/';
		if (r < 0 && errno != EEXIST)
			return -1;
	}
	return mkdir(path, 0555) < 0 && errno != EEXIST ? -1 : 0;
}

/* The most trees PID 1 hands over for our root: the pod's cgroups, one a
 * hierarchy. */
#define MAX_TREES 64

/* The bounding set we keep, as PID 1 sends it with our trees: the apps'
 * (rkt's apps read it as their pid 1's). None until it comes. */
static unsigned long long keep_bounding;

/* take_trees receives from PID 1, on fd 3, the bounding set we keep and
 * the trees our root holds: 'r', the set as 16 hex digits and a NUL,
 * then each tree's path NUL-terminated, with a detached read-only
 * mount of each (SCM_RIGHTS), and attaches each at its path under
 * EMPTY_ROOT. rkt's apps read their cgroups' limits through /proc/1/root,
 * their pid 1's root, as rkt's stage1 let them (rkt's tests do); nothing
 * else is there. A socket that ends first (PID 1 died) leaves it empty. */
static int take_trees(void)
{
	static char buf[16384];
	union {
		char buf[CMSG_SPACE(MAX_TREES * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf - 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	ssize_t n;
	do
		n = recvmsg(REPORT_FD, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0 || buf[0] != 'r')
		return 0;
	buf[n] = 0;
	char *end;
	errno = 0;
	unsigned long long mask = strtoull(buf + 1, &end, 16);
	if (n < 18 || end != buf + 17 || *end != 0 || errno) {
		errno = EINVAL;
		return fail("bounding set");
	}
	int fds[MAX_TREES], nfds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (int i = 0; i < k && nfds < MAX_TREES; i++)
			memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	char *p = buf + 18;
	for (int i = 0; i < nfds && p < buf + n; i++) {
		size_t len = strlen(p);
		if (len == 0 || p[0] != '/' || strstr(p, "/..") || len > 4000) {
			errno = EINVAL;
			return fail("tree path");
		}
		char dst[4096 + sizeof EMPTY_ROOT];
		memcpy(dst, EMPTY_ROOT, sizeof EMPTY_ROOT - 1);
		memcpy(dst + sizeof EMPTY_ROOT - 1, p, len + 1);
		if (mkdirs(dst) < 0)
			return fail("tree mount point");
		if (syscall(SYS_move_mount, fds[i], "", AT_FDCWD, dst, MOVE_MOUNT_F_EMPTY_PATH_) < 0)
			return fail("attach tree");
		close(fds[i]);
		p += len + 1;
	}
	keep_bounding = mask;
	return 0;
}

/* own_root leaves the pod's mounts, in the mount namespace of our own that
 * main made: its only mounts become a read-only tmpfs, our root and cwd,
 * and the trees PID 1 hands over, read-only. */
static int own_root(void)
{
	if (mount("tmpfs", EMPTY_ROOT, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=555,size=64k") < 0)
		return fail("mount tmpfs");
	if (take_trees() != 0)
		return 254;
	if (chdir(EMPTY_ROOT) < 0)
		return fail("chdir");
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return fail("pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		return fail("detach the old root");
	if (chdir("/") < 0)
		return fail("chdir /");
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return fail("read-only root");
	return 0;
}

/* drop_everything leaves no capability in any set but the bounding set
 * (keep_bounding, a ceiling only), and no way to get one back by executing
 * anything: no_new_privs caps what an exec gives at what we hold (none),
 * and SECBIT_NOROOT, locked, takes away root's grant at exec besides. */
static int drop_everything(void)
{
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return fail("prctl dumpable");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return fail("prctl no_new_privs");
	for (int c = 0; c <= 63; c++)
		if (!(keep_bounding >> c & 1) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return fail("drop the bounding set");
	/* While we still hold CAP_SETPCAP. */
	if (prctl(PR_SET_SECUREBITS, SECBITS_LOCKED_DOWN, 0, 0, 0) < 0)
		return fail("securebits");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return fail("clear the ambient set");
	struct cap_header h = {.version = CAP_VERSION_3};
	struct cap_data d[2];
	memset(d, 0, sizeof d);
	if (syscall(SYS_capset, &h, d) < 0)
		return fail("capset");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 0 && strcmp(argv[0], POD1_ROLE_CGROUP_NS) == 0)
		return cgroupns();
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_SETMASK, &chld, NULL);
	/* Its name in ps and top: PID 1 execs it through /proc/self/fd/N,
	 * which names the process after N. */
	prctl(PR_SET_NAME, "pod1-pause", 0, 0, 0);
	if (getpid() != 1) {
		fprintf(stderr, "stage1: pod1-pause: not the init of a pid namespace\n");
		return 254;
	}
	/* A mount namespace of our own first: once it has our procfs
	 * instances, PID 1 pivots into its own root, which would be ours
	 * too while we shared its namespace. */
	if (unshare(CLONE_NEWNS) < 0)
		return fail("unshare mount namespace");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return fail("make / private");
	if (send_procfs() < 0)
		return fail("send procfs");
	int code = own_root();
	if (code == 0)
		code = drop_everything();
	if (code != 0)
		return code;
	/* PID 1 starts no app before it hears this. */
	char done = 'd';
	while (write(REPORT_FD, &done, 1) < 0 && errno == EINTR)
		;
	close(REPORT_FD);
	/* Nothing of the pod's: not even its console. */
	syscall(SYS_close_range, 0U, ~0U, 0);
	for (;;) {
		while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
			;
		sigwaitinfo(&chld, NULL);
	}
}
