/* Generated from stage1-init/handover/handover.go by go generate
 * (stage1-init/handover/mkheader): do not edit. What each means is
 * said there. */
#ifndef POD1_HANDOVER_H
#define POD1_HANDOVER_H

#define POD1_STAGE1_BINARY "stage1-init"
#define POD1_ROLE_RUN "run"
#define POD1_INIT_BINARY "pod1-init"
#define POD1_ROLE_INIT "pod1-init"
#define POD1_ROLE_APP "pod1-app"
#define POD1_WAITER_BINARY "pod1-waiter"
#define POD1_ROLE_KEEPER "pod1-lock"
#define POD1_PAUSE_BINARY "pod1-pause"
#define POD1_ROLE_PAUSE "pod1-pause"
#define POD1_ROLE_CGROUP_NS "pod1-cgroupns"

#define POD1_WAITER_ENV "POD1_WAITER_FD"

#define POD1_CONFIG_FD 3
#define POD1_LOCK_SLOT_FD 4
#define POD1_PARENT_FD 5
#define POD1_READY_FD 6
#define POD1_LOG_DIR_FD 7
#define POD1_CRI_DIR_FD 8
#define POD1_COMMIT_FD 9
#define POD1_PAUSE_EXE_FD 10
#define POD1_JOURNAL_DIR_FD 11

#define POD1_HOST_READY "host ready\n"

#define POD1_READY_BYTE 1

#define POD1_STAGE1_CGROUP "stage1"

#define POD1_KEEPER_LOCK_FD 3
#define POD1_KEEPER_PID1_FD 4
#define POD1_KEEPER_COMMIT_FD 5
#define POD1_KEEPER_DONE_FD 6

#define POD1_COMMIT_LINE_END '\n'

#define POD1_REPORT_PID1 0
#define POD1_REPORT_KEEPER 1
#define POD1_REPORT_STAGE2 2
#define POD1_REPORT_FIRST_CGROUP 3

#define POD1_REPORT_NO_BIND "-"

#define POD1_PAUSE_SOCK_FD 3

#endif
