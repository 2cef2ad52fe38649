package seccomp

// The named sets a seccomp isolator may use ("wildcards"). The appc spec
// reserves @appc.io/all and @appc.io/empty; rkt defined @rkt/* and
// @docker/* (rkt:stage1/init/common/seccomp_wildcards.go, mirroring Docker
// 1.12's default profile), and images written for rkt use them, so they
// mean here exactly the names they meant there. Names that are not system
// calls of this architecture (chown32, socketcall, ...) are skipped when a
// set is expanded, as libseccomp skipped them for rkt.
const (
	WildcardAll   = "@appc.io/all"
	WildcardEmpty = "@appc.io/empty"
)

// rktBlacklist is rkt's (and Docker 1.12's) default blacklist: calls that
// reach the kernel's global state (modules, clocks, mounts, swap, reboot,
// keyrings, other processes' memory, namespaces).
var rktBlacklist = []string{
	"acct", "add_key", "adjtimex", "bpf", "clock_adjtime", "clock_settime",
	"create_module", "delete_module", "finit_module", "get_kernel_syms",
	"get_mempolicy", "init_module", "ioperm", "iopl", "kcmp",
	"kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "mbind",
	"mount", "move_pages", "name_to_handle_at", "nfsservctl",
	"open_by_handle_at", "perf_event_open", "pivot_root", "process_vm_readv",
	"process_vm_writev", "ptrace", "query_module", "quotactl", "reboot",
	"request_key", "set_mempolicy", "setns", "settimeofday", "stime",
	"swapon", "swapoff", "sysfs", "_sysctl", "umount", "umount2", "unshare",
	"uselib", "userfaultfd", "ustat", "vm86", "vm86old",
}

// newerEquivalents are calls added to the kernel since rkt's list was
// written that give the powers that list withholds: the new mount API
// (mount, pivot_root), quotactl_fd (quotactl), pidfd_getfd and
// process_madvise (ptrace-level access to other processes), and io_uring,
// whose operations are not seen by seccomp at all (Docker blocks it since
// moby#46762).
var newerEquivalents = []string{
	"fsconfig", "fsmount", "fsopen", "fspick", "mount_setattr", "move_mount",
	"open_tree", "open_tree_attr", "quotactl_fd", "pidfd_getfd",
	"process_madvise", "io_uring_enter", "io_uring_register", "io_uring_setup",
}

// rktWhitelist is rkt's (and Docker 1.12's) default whitelist, which rkt
// applied when an app named no seccomp isolator.
var rktWhitelist = []string{
	"accept", "accept4", "access", "alarm", "bind", "brk", "capget", "capset",
	"chdir", "chmod", "chown", "chown32", "clock_getres", "clock_gettime",
	"clock_nanosleep", "close", "connect", "copy_file_range", "creat", "dup",
	"dup2", "dup3", "epoll_create", "epoll_create1", "epoll_ctl",
	"epoll_ctl_old", "epoll_pwait", "epoll_wait", "epoll_wait_old", "eventfd",
	"eventfd2", "execve", "execveat", "exit", "exit_group", "faccessat",
	"fadvise64", "fadvise64_64", "fallocate", "fanotify_mark", "fchdir",
	"fchmod", "fchmodat", "fchown", "fchown32", "fchownat", "fcntl", "fcntl64",
	"fdatasync", "fgetxattr", "flistxattr", "flock", "fork", "fremovexattr",
	"fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64",
	"fsync", "ftruncate", "ftruncate64", "futex", "futimesat", "getcpu",
	"getcwd", "getdents", "getdents64", "getegid", "getegid32", "geteuid",
	"geteuid32", "getgid", "getgid32", "getgroups", "getgroups32",
	"getitimer", "getpeername", "getpgid", "getpgrp", "getpid", "getppid",
	"getpriority", "getrandom", "getresgid", "getresgid32", "getresuid",
	"getresuid32", "getrlimit", "get_robust_list", "getrusage", "getsid",
	"getsockname", "getsockopt", "get_thread_area", "gettid", "gettimeofday",
	"getuid", "getuid32", "getxattr", "inotify_add_watch", "inotify_init",
	"inotify_init1", "inotify_rm_watch", "io_cancel", "ioctl", "io_destroy",
	"io_getevents", "ioprio_get", "ioprio_set", "io_setup", "io_submit",
	"ipc", "kill", "lchown", "lchown32", "lgetxattr", "link", "linkat",
	"listen", "listxattr", "llistxattr", "_llseek", "lremovexattr", "lseek",
	"lsetxattr", "lstat", "lstat64", "madvise", "memfd_create", "mincore",
	"mkdir", "mkdirat", "mknod", "mknodat", "mlock", "mlock2", "mlockall",
	"mmap", "mmap2", "mprotect", "mq_getsetattr", "mq_notify", "mq_open",
	"mq_timedreceive", "mq_timedsend", "mq_unlink", "mremap", "msgctl",
	"msgget", "msgrcv", "msgsnd", "msync", "munlock", "munlockall", "munmap",
	"nanosleep", "newfstatat", "_newselect", "open", "openat", "pause",
	"personality", "pipe", "pipe2", "poll", "ppoll", "prctl", "pread64",
	"preadv", "prlimit64", "pselect6", "pwrite64", "pwritev", "read",
	"readahead", "readlink", "readlinkat", "readv", "recv", "recvfrom",
	"recvmmsg", "recvmsg", "remap_file_pages", "removexattr", "rename",
	"renameat", "renameat2", "restart_syscall", "rmdir", "rt_sigaction",
	"rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn",
	"rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo",
	"sched_getaffinity", "sched_getattr", "sched_getparam",
	"sched_get_priority_max", "sched_get_priority_min", "sched_getscheduler",
	"sched_rr_get_interval", "sched_setaffinity", "sched_setattr",
	"sched_setparam", "sched_setscheduler", "sched_yield", "seccomp",
	"select", "semctl", "semget", "semop", "semtimedop", "send", "sendfile",
	"sendfile64", "sendmmsg", "sendmsg", "sendto", "setfsgid", "setfsgid32",
	"setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups",
	"setgroups32", "setitimer", "setpgid", "setpriority", "setregid",
	"setregid32", "setresgid", "setresgid32", "setresuid", "setresuid32",
	"setreuid", "setreuid32", "setrlimit", "set_robust_list", "setsid",
	"setsockopt", "set_thread_area", "set_tid_address", "setuid", "setuid32",
	"setxattr", "shmat", "shmctl", "shmdt", "shmget", "shutdown",
	"sigaltstack", "signalfd", "signalfd4", "sigreturn", "socket",
	"socketcall", "socketpair", "splice", "stat", "stat64", "statfs",
	"statfs64", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs",
	"sysinfo", "syslog", "tee", "tgkill", "time", "timer_create",
	"timer_delete", "timerfd_create", "timerfd_gettime", "timerfd_settime",
	"timer_getoverrun", "timer_gettime", "timer_settime", "times", "tkill",
	"truncate", "truncate64", "ugetrlimit", "umask", "uname", "unlink",
	"unlinkat", "utime", "utimensat", "utimes", "vfork", "vmsplice", "wait4",
	"waitid", "waitpid", "write", "writev", "arch_prctl", "modify_ldt",
	"chroot", "clone",
}

// wildcards maps each named set to its members.
var wildcards = map[string][]string{
	"@rkt/default-blacklist":    rktBlacklist,
	"@rkt/default-whitelist":    rktWhitelist,
	"@docker/default-blacklist": rktBlacklist,
	"@docker/default-whitelist": rktWhitelist,
	// Ours: the filter an app gets when it names none.
	"@pod1/default-blacklist": DefaultDenied(),
}

// DefaultDenied lists the calls the default filter refuses: rkt's
// blacklist and the newer calls with the same powers.
func DefaultDenied() []string {
	return append(append([]string{}, rktBlacklist...), newerEquivalents...)
}
