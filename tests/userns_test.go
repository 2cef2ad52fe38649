package tests

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

// The range rkt gave its pods in the contract's observation.
const (
	usersBase  = 1010499584
	usersCount = 65536
)

var privateUsers = "--private-users=" + strconv.Itoa(usersBase) + ":" + strconv.Itoa(usersCount)

// shiftOwnership does what rkt's stage0 does to a pod's stage1 rootfs
// (the apps' roots included) with --private-users: every owner moves up by
// base. Hard links to the repo's binaries are replaced by copies first, so
// the shift stays in the pod.
func shiftOwnership(t *testing.T, p *Pod, base int) {
	t.Helper()
	root := filepath.Join(p.Dir, layout.Stage1RootFS)
	must(t, filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		if d.Type().IsRegular() && st.Nlink > 1 {
			copyFile(t, path, path+".copy")
			if err := os.Rename(path+".copy", path); err != nil {
				return err
			}
		}
		return unix.Lchown(path, int(st.Uid)+base, int(st.Gid)+base)
	}))
}

func ownerOf(t *testing.T, path string) (int, int) {
	t.Helper()
	st, err := os.Lstat(path)
	must(t, err)
	s := st.Sys().(*syscall.Stat_t)
	return int(s.Uid), int(s.Gid)
}

// With --private-users every app runs in a user namespace with rkt's
// mapping: its root is uid 0 inside and BASE on the host, the files stage0
// shifted are its own, and what it creates in a volume is owned by BASE.
// Even granted CAP_SYS_PTRACE and CAP_SYS_ADMIN, it cannot reach the host
// through PID 1's /proc/1/root. Ports below 1024 can still be bound. The
// negative control is the same pod without the flag.
func TestPrivateUsers(t *testing.T) {
	for _, private := range []bool{true, false} {
		t.Run(map[bool]string{true: "private", false: "host-users"}[private], func(t *testing.T) {
			vol := t.TempDir()
			must(t, os.Chmod(vol, 0o777))
			mp, vols := volume(vol)
			apps := []App{
				{Name: "a", MPoints: mp, Exec: probe("cat", "/proc/self/uid_map", "+", "ids", "+", "owner", "/bin/probe",
					"+", "touch", "/tmp/mine", "+", "touch", "/vol/from-app", "+", "listen", "0.0.0.0:80")},
				{Name: "p", Exec: probe("ls", "/proc/1/root/")},
			}
			p := isoPod(t, apps, Isolators{"p": {isolator("os/linux/capabilities-retain-set",
				map[string]any{"set": []string{"CAP_SYS_PTRACE", "CAP_SYS_ADMIN", "CAP_DAC_READ_SEARCH", "CAP_DAC_OVERRIDE"}})}}, vols)
			args := []string{"--net=none"}
			base := 0
			if private {
				shiftOwnership(t, p, usersBase)
				args = append(args, privateUsers)
				base = usersBase
			}
			r := runPod(t, p, RunOpts{Args: args})
			if r.Code != 0 || p.Status(t, "a") != 0 || p.Status(t, "p") != 0 {
				t.Fatalf("exit %d statuses %d %d\nstdout %s\nstderr %s", r.Code, p.Status(t, "a"), p.Status(t, "p"), r.Stdout, r.Stderr)
			}
			out := r.Stdout.String()
			wantMap := "0 0 4294967295"
			if private {
				wantMap = "0 " + strconv.Itoa(usersBase) + " " + strconv.Itoa(usersCount)
			}
			for _, w := range []string{"cat " + wantMap, "ids uid=0 gid=0 groups=[]", "owner /bin/probe uid=0 gid=0", "listen 0.0.0.0:80 ok"} {
				if !strings.Contains(strings.Join(strings.Fields(strings.ReplaceAll(out, "\n", " | ")), " ")+" |", w+" |") {
					t.Errorf("app lacks %q:\n%s", w, out)
				}
			}
			if u, g := ownerOf(t, filepath.Join(vol, "from-app")); u != base || g != base {
				t.Errorf("file the app made in a volume is owned by %d:%d, want %d:%d", u, g, base, base)
			}
			root := filepath.Join(p.Dir, layout.AppRootfs("a"))
			if u, _ := ownerOf(t, filepath.Join(root, "tmp/mine")); u != base {
				t.Errorf("file the app made in its root is owned by %d, want %d", u, base)
			}
			reached := strings.Contains(out, "ls /proc/1/root/ ") && !strings.Contains(out, "ls /proc/1/root/ error")
			// CAP_SYS_PTRACE is not named: the default filter refuses
			// ptrace, and PID 1's root shows nothing of the host.
			warned := strings.Contains(r.Stderr.String(), `app "p" has CAP_DAC_READ_SEARCH, CAP_SYS_ADMIN:`)
			if warned == private {
				t.Errorf("warning about a way to the host: %v, want %v: %s", warned, !private, r.Stderr)
			}
			if private && reached {
				t.Errorf("an app in a user namespace read PID 1's root: %s", out)
			}
			if !private && !reached {
				t.Errorf("negative control: the app could not read PID 1's root, so the check proves nothing: %s", out)
			}
		})
	}
}

// In a user namespace an app is still supervised like any other: each
// restart is a new process in a new namespace with the same mapping, a stop
// reaches it, and the statuses are written.
func TestPrivateUsersRestartAndStop(t *testing.T) {
	vol := t.TempDir()
	must(t, os.Chmod(vol, 0o777))
	mp, vols := volume(vol)
	apps := []App{
		{Name: "crashy", MPoints: mp, Exec: probe("append", "/vol/runs", "+", "exit", "3"), Annotations: map[string]string{
			"pod1/restart-policy": "on-failure", "pod1/restart-backoff": "10ms", "pod1/start-limit-burst": "3", "pod1/start-limit-interval": "1h"}},
		{Name: "long", Exec: probe("sleep", "1h")},
	}
	// The pod lives as long as "long" does, whatever becomes of crashy.
	p := newPodRaw(t, manifestAnn(apps, vols, map[string]string{"pod1/exit-policy": "main-app", "pod1/main-app": "long"}), apps)
	shiftOwnership(t, p, usersBase)
	r := start(t, p, RunOpts{Args: []string{"--net=none", "--debug", privateUsers}})
	defer func() {
		if t.Failed() {
			t.Logf("stderr: %s", r.Stderr)
		}
	}()
	waitFor(t, 10*time.Second, "crashy to give up", func() bool { return p.Status(t, "crashy") == 3 })
	if runs := len(runTimes(t, filepath.Join(vol, "runs"))); runs != 3 {
		t.Errorf("crashy ran %d times, want 3", runs)
	}
	if u, _ := ownerOf(t, filepath.Join(vol, "runs")); u != usersBase {
		t.Errorf("crashy's file is owned by %d, want %d", u, usersBase)
	}
	pid := appPid(t, p, "long")
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/uid_map")
	must(t, err)
	if got := strings.Join(strings.Fields(string(b)), " "); got != "0 "+strconv.Itoa(usersBase)+" "+strconv.Itoa(usersCount) {
		t.Errorf("long's uid map %q", got)
	}
	must(t, r.Cmd.Process.Signal(unix.SIGTERM))
	r.Wait(t)
	if st := p.Status(t, "long"); st != 143 {
		t.Fatalf("long: status %d; %s", st, r.Stderr)
	}
}

// An empty volume in a pod with --private-users is owned, on the host, by
// the shifted ids: by default the apps' root owns it and can write to it,
// as without user namespaces. An owner outside the range is refused.
func TestPrivateUsersEmptyVolume(t *testing.T) {
	mp := []map[string]any{{"name": "scratch", "path": "/scratch"}, {"name": "mine", "path": "/mine"}}
	vols := []map[string]any{{"name": "scratch", "kind": "empty"}, {"name": "mine", "kind": "empty", "uid": 1000, "gid": 1000, "mode": "0700"}}
	p := newPod(t, []App{
		{Name: "a", MPoints: mp, Exec: probe("touch", "/scratch/x", "+", "owner", "/scratch", "+", "owner", "/mine")},
		{Name: "u", MPoints: mp, User: "1000", Exec: probe("touch", "/mine/y")},
	}, vols)
	shiftOwnership(t, p, usersBase)
	r := runPod(t, p, RunOpts{Args: []string{"--net=none", privateUsers}})
	if r.Code != 0 || p.Status(t, "a") != 0 || p.Status(t, "u") != 0 {
		t.Fatalf("exit %d, statuses %d %d\n%s\n%s", r.Code, p.Status(t, "a"), p.Status(t, "u"), r.Stdout, r.Stderr)
	}
	for _, w := range []string{"owner /scratch uid=0 gid=0", "owner /mine uid=1000 gid=1000"} {
		if !strings.Contains(r.Stdout.String(), w+"\n") {
			t.Errorf("app lacks %q:\n%s", w, r.Stdout)
		}
	}
	if u, g := ownerOf(t, filepath.Join(p.Dir, "sharedVolumes/mine")); u != usersBase+1000 || g != usersBase+1000 {
		t.Errorf("volume mine is owned by %d:%d on the host", u, g)
	}

	vols[1]["uid"] = 70000
	p = newPod(t, []App{okApp("a")}, vols)
	r = runPod(t, p, RunOpts{Args: []string{"--net=none", privateUsers}})
	assertRefused(t, p, r, "pod manifest: volumes[mine]: owner id 70000 is outside the pod's user namespace (0-65535, --private-users)")
}
