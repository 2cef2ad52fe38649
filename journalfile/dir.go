package journalfile

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Active is the file a Dir appends to, journald's name for a system's.
const Active = "system.journal"

// Dir is one machine's journal directory, written through a descriptor
// of it: entries go to Active; a full Active is archived under journald's
// name for it (system@<seqnum id>-<first seqnum>-<first realtime>.journal,
// which journalctl reads with the rest) and a new one continues the
// sequence. Archived files past keep are removed, oldest first, so the
// directory holds at most keep+1 files of MaxSize.
type Dir struct {
	fd   int
	opts Options
	keep int
	w    *Writer
}

// OpenDir starts the journal in the directory dir (which Dir takes over),
// with a new Active: one that is there is an error.
func OpenDir(dir int, opts Options, keep int) (*Dir, error) {
	w, err := CreateAt(dir, Active, opts)
	if err != nil {
		return nil, err
	}
	return &Dir{fd: dir, opts: opts, keep: keep, w: w}, nil
}

// Append adds an entry (Writer.Append), to a new file when Active is full.
func (d *Dir) Append(realtime time.Time, monotonic time.Duration, fields [][]byte) error {
	if d.w == nil {
		return errors.New("journal directory closed")
	}
	err := d.w.Append(realtime, monotonic, fields)
	if !errors.Is(err, ErrFull) {
		return err
	}
	if err := d.rotate(); err != nil {
		return err
	}
	return d.w.Append(realtime, monotonic, fields)
}

// rotate archives Active and starts a new one that continues its
// sequence.
func (d *Dir) rotate() error {
	seq, real := d.w.Head()
	opts := d.opts
	opts.SeqnumID, opts.NextSeqnum = d.w.SeqnumID(), d.w.NextSeqnum()
	err := d.w.Close(true)
	d.w = nil
	if err != nil {
		return err
	}
	id := opts.SeqnumID
	name := fmt.Sprintf("system@%x-%016x-%016x.journal", id[:], seq, real)
	if err := unix.Renameat(d.fd, Active, d.fd, name); err != nil {
		return fmt.Errorf("archive %s: %w", Active, err)
	}
	if err := d.prune(); err != nil {
		return err
	}
	w, err := CreateAt(d.fd, Active, opts)
	if err != nil {
		return err
	}
	d.w = w
	return nil
}

// prune removes the oldest archived files past keep. Their names sort as
// their sequence: one sequence id, the first seqnum in fixed-width hex.
func (d *Dir) prune() error {
	fd, err := unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("journal directory: %w", err)
	}
	f := os.NewFile(uintptr(fd), "journal directory")
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("journal directory: %w", err)
	}
	var archived []string
	for _, n := range names {
		if strings.HasPrefix(n, "system@") && strings.HasSuffix(n, ".journal") {
			archived = append(archived, n)
		}
	}
	slices.Sort(archived)
	for len(archived) > d.keep {
		if err := unix.Unlinkat(d.fd, archived[0], 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove %s: %w", archived[0], err)
		}
		archived = archived[1:]
	}
	return nil
}

// Flush makes the entries appended so far visible (Writer.Flush).
func (d *Dir) Flush() error {
	if d.w == nil {
		return nil
	}
	return d.w.Flush()
}

// Close marks Active offline and closes it and the directory.
func (d *Dir) Close() error {
	var err error
	if d.w != nil {
		err = d.w.Close(false)
		d.w = nil
	}
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
	return err
}
