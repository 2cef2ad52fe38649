package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"
)

// Extract unpacks the ACI tar stream r into dest, an existing directory that
// should be empty. Images are untrusted input and pod1 runs as root, so no
// entry may land outside dest: names with ".." or a leading "/" are refused,
// and every entry is created relative to a directory handle resolved inside
// the rootfs (pathrs-lite), so a symlink planted by an earlier entry
// ("evil -> /tmp" followed by "evil/x") is followed as the app would see it,
// to rootfs/tmp/x, or the entry is refused if that does not exist. Mode
// (including setuid/setgid/sticky), owner, mtime, symlinks and hardlinks are
// preserved; device nodes and FIFOs are refused.
func Extract(r io.Reader, dest string) error {
	return ExtractLimited(r, dest, DefaultLimits)
}

// Limits bound what unpacking one image may create: an image is untrusted,
// and a small archive (compressed zeros, a sparse file) can unpack to far
// more than the disk holds.
type Limits struct {
	// MaxBytes bounds the sum of the sizes of the regular files (their
	// apparent sizes: a sparse file is written out in full).
	MaxBytes int64
	// MaxEntries bounds the number of entries (files, directories,
	// links).
	MaxEntries int
}

// DefaultLimits are the bounds when none are given: beyond any image seen
// in practice, short of filling a disk or the inode table.
var DefaultLimits = Limits{MaxBytes: 16 << 30, MaxEntries: 1 << 20}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultLimits.MaxEntries
	}
	return l
}

// ExtractLimited is Extract within lim (zero fields: the defaults). An
// entry that would exceed a bound is refused before anything of it is
// written, with an error satisfying errors.Is(err, ErrTooLarge).
func ExtractLimited(r io.Reader, dest string, lim Limits) error {
	lim = lim.withDefaults()
	root, err := os.OpenFile(dest, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open extraction root: %w", err)
	}
	defer root.Close()
	x := extractor{root: root}
	defer x.close()
	var bytes int64
	entries := 0

	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar: %w", err)
		}
		entries++
		if entries > lim.MaxEntries {
			return fmt.Errorf("%w: more than %d entries (--image-max-files)", ErrTooLarge, lim.MaxEntries)
		}
		if hdr.Typeflag == tar.TypeReg {
			if hdr.Size > lim.MaxBytes-bytes {
				return fmt.Errorf("%w: more than %d bytes of files (--image-max-size), at %q", ErrTooLarge, lim.MaxBytes, hdr.Name)
			}
			bytes += hdr.Size
		}
		if err := x.entry(hdr, tr); err != nil {
			return fmt.Errorf("tar entry %q: %w", hdr.Name, err)
		}
	}
}

// extractor holds the two roots entries are resolved in: the ACI root for
// "manifest" and "rootfs" themselves, and the rootfs for everything under
// it, so an image symlink to "/tmp" means rootfs/tmp, as it will inside
// the pod.
type extractor struct {
	root   *os.File
	rootfs *os.File // opened when the first entry below rootfs/ arrives
}

func (x *extractor) close() {
	if x.rootfs != nil {
		_ = x.rootfs.Close()
	}
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	name, err := entryName(hdr.Name)
	if err != nil || name == "" {
		return err // "" is "." or "./": the archive root itself
	}
	if err := checkTopLevel(name, hdr.Typeflag); err != nil {
		return err
	}
	rel, ok := strings.CutPrefix(name, RootfsDir+"/")
	if !ok {
		return writeEntry(x.root, name, hdr, r, nil)
	}
	if x.rootfs == nil {
		// Archives may omit the rootfs/ entry itself.
		h, err := pathrs.MkdirAllHandle(x.root, RootfsDir, 0o755)
		if err != nil {
			return fmt.Errorf("create rootfs: %w", err)
		}
		x.rootfs = h
	}
	return writeEntry(x.rootfs, rel, hdr, r, x.rootfs)
}

// entryName validates a tar name and returns it cleaned and relative. Names
// with ".." components or a leading "/" never occur in archives built by
// actool or tar -C, so they are refused outright instead of being clamped:
// an image that carries them is broken or hostile either way.
func entryName(raw string) (string, error) {
	if strings.HasPrefix(raw, "/") {
		return "", ErrAbsolutePath
	}
	for _, part := range strings.Split(raw, "/") {
		if part == ".." {
			return "", ErrDotDot
		}
	}
	clean := path.Clean(raw)
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

// checkTopLevel enforces the ACI layout: only "manifest" (a regular file, so
// it can never be a symlink to a host file that we read back later) and the
// "rootfs" tree may appear.
func checkTopLevel(name string, typ byte) error {
	switch {
	case name == ManifestFile:
		if typ != tar.TypeReg {
			return fmt.Errorf("%w: manifest must be a regular file", ErrNotACI)
		}
	case name == RootfsDir:
		if typ != tar.TypeDir {
			return fmt.Errorf("%w: rootfs must be a directory", ErrNotACI)
		}
	case strings.HasPrefix(name, RootfsDir+"/"):
	default:
		return fmt.Errorf("%w: only manifest and rootfs/ may appear in an ACI", ErrNotACI)
	}
	return nil
}

// writeEntry creates one entry at name relative to root. The parent
// directory is created (0755, later fixed by its own entry if the archive
// has one) and opened inside root; the final component is then created with
// *at syscalls that never follow a symlink in that last position. Hardlink
// targets are resolved in linkRoot (the rootfs); nil refuses hardlinks.
func writeEntry(root *os.File, name string, hdr *tar.Header, r io.Reader, linkRoot *os.File) error {
	dir, base := path.Split(name)
	parent := root
	if dir != "" {
		p, err := pathrs.MkdirAllHandle(root, dir, 0o755)
		if err != nil {
			return fmt.Errorf("create parent directory: %w", err)
		}
		defer p.Close()
		parent = p
	}
	pfd := int(parent.Fd())
	mode := uint32(hdr.Mode) & 0o7777

	switch hdr.Typeflag {
	case tar.TypeDir:
		return writeDir(pfd, base, mode, hdr)
	case tar.TypeReg:
		if err := clearSlot(pfd, base); err != nil {
			return err
		}
		return writeRegular(pfd, base, mode, hdr, r)
	case tar.TypeSymlink:
		if err := clearSlot(pfd, base); err != nil {
			return err
		}
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return fmt.Errorf("symlink: %w", err)
		}
		return finishNoFollow(pfd, base, hdr)
	case tar.TypeLink:
		if err := clearSlot(pfd, base); err != nil {
			return err
		}
		if linkRoot == nil {
			return fmt.Errorf("%w: hardlink outside rootfs/", ErrNotACI)
		}
		return writeHardlink(linkRoot, pfd, base, hdr.Linkname)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return ErrSpecialFile
	default:
		return fmt.Errorf("%w: type %q", ErrUnsupportedEntry, hdr.Typeflag)
	}
}

// clearSlot removes a non-directory that an earlier entry left at base: tar
// semantics are "last entry wins", and a stale symlink there must not be
// written through.
func clearSlot(pfd int, base string) error {
	var st unix.Stat_t
	err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat existing entry: %w", err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("replace directory: %w", unix.EISDIR)
	}
	if err := unix.Unlinkat(pfd, base, 0); err != nil {
		return fmt.Errorf("remove existing entry: %w", err)
	}
	return nil
}

func writeDir(pfd int, base string, mode uint32, hdr *tar.Header) error {
	err := unix.Mkdirat(pfd, base, 0o700)
	if errors.Is(err, unix.EEXIST) {
		// A directory may be listed after its children (or twice); anything
		// else in the way (say a symlink) is replaced, not followed.
		var st unix.Stat_t
		if serr := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); serr != nil {
			return fmt.Errorf("stat existing entry: %w", serr)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if uerr := unix.Unlinkat(pfd, base, 0); uerr != nil {
				return fmt.Errorf("remove existing entry: %w", uerr)
			}
			err = unix.Mkdirat(pfd, base, 0o700)
		} else {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("mkdir: %w", err)
	}
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open directory: %w", err)
	}
	defer unix.Close(fd)
	return ownAndMode(fd, mode, hdr)
}

func writeRegular(pfd int, base string, mode uint32, hdr *tar.Header, r io.Reader) error {
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create file: %w", err)
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	if _, err := io.Copy(f, r); err != nil {
		return fmt.Errorf("write file: %w", err)
	}
	if err := ownAndMode(int(f.Fd()), mode, hdr); err != nil {
		return err
	}
	return setTimes(pfd, base, hdr)
}

// ownAndMode chowns before chmod because chown clears setuid/setgid bits.
func ownAndMode(fd int, mode uint32, hdr *tar.Header) error {
	if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown %d:%d: %w", hdr.Uid, hdr.Gid, err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod %#o: %w", mode, err)
	}
	return nil
}

// finishNoFollow sets owner and times on a symlink itself, never its target.
func finishNoFollow(pfd int, base string, hdr *tar.Header) error {
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %d:%d: %w", hdr.Uid, hdr.Gid, err)
	}
	return setTimes(pfd, base, hdr)
}

// setTimes keeps the archive's mtime so tools that compare timestamps see
// the image as built. Directory times are not kept: adding children
// changes them anyway.
func setTimes(pfd int, base string, hdr *tar.Header) error {
	mt := unix.NsecToTimespec(hdr.ModTime.UnixNano())
	ts := []unix.Timespec{mt, mt}
	if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// writeHardlink links to an entry already extracted. Tar stores hardlink
// targets as archive names ("rootfs/bin/x"); the part below rootfs/ is
// resolved inside the rootfs like any entry name, and linkat(2) without
// AT_SYMLINK_FOLLOW links a symlink itself rather than what it points to, so
// a hardlink cannot reach a host file either.
func writeHardlink(rootfs *os.File, pfd int, base, linkname string) error {
	target, err := entryName(linkname)
	if err != nil {
		return fmt.Errorf("link target %q: %w", linkname, err)
	}
	rel, ok := strings.CutPrefix(target, RootfsDir+"/")
	if !ok {
		return fmt.Errorf("link target %q: %w: must be inside rootfs/", linkname, ErrNotACI)
	}
	tdir, tbase := path.Split(rel)
	if tdir == "" {
		tdir = "."
	}
	th, err := pathrs.OpenatInRoot(rootfs, tdir)
	if err != nil {
		return fmt.Errorf("link target %q: %w", linkname, err)
	}
	defer th.Close()
	if err := unix.Linkat(int(th.Fd()), tbase, pfd, base, 0); err != nil {
		return fmt.Errorf("link to %q: %w", linkname, err)
	}
	return nil
}
