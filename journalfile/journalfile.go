// Package journalfile writes a journal file in systemd's on-disk format
// (systemd.io/JOURNAL_FILE_FORMAT), so that journalctl reads a pod's lines
// where rkt's users look for them: `journalctl -M rkt-<uuid>` and, after
// the pod, `journalctl -m _MACHINE_ID=<id>`. rkt's stage1 had a journald
// in the pod write that file; pod1's stage1 has none, and links no
// libsystemd (no cgo), so it writes the file itself.
//
// The file is the format's plainest form, which every journalctl since
// systemd 189 reads: no compression, no keyed hash (lookup3, not siphash),
// no compact items, no sealing. Only this package writes it; it appends
// entries and never rewrites one. Each append first writes its new objects
// and only then links them (hash table, entry arrays, header), so a reader
// that maps the file meanwhile sees the entries before it, whole.
//
// What the writer keeps in memory is bounded by a constant, not by the
// file: the header's counters, the field objects (the caller's few names),
// the tail of the file's entry array chain, and a small cache of the data
// objects entries share (an app's name, the pod's hostname). Everything
// else, a message's data object above all, is found in the file through
// its hash table, as journald finds it. An append that would take the file
// past its size cap writes nothing and returns ErrFull; the caller starts
// another file. Entries become visible to readers at Flush.
package journalfile

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// ErrFull means the entry would take the file past its size cap; nothing
// of it was written.
var ErrFull = errors.New("journal file full")

// The sizes and offsets of the format (systemd's journal-def.h).
const (
	// headerSize covers the header through field_hash_chain_depth
	// (systemd 246); readers take the fields it holds and no more.
	headerSize = 256

	objHeaderSize   = 16
	dataHeaderSize  = objHeaderSize + 48
	fieldHeaderSize = objHeaderSize + 24
	entryHeaderSize = objHeaderSize + 48
	entryItemSize   = 16
	hashItemSize    = 16
	arrayHeaderSize = objHeaderSize + 8

	objData           = 1
	objField          = 2
	objEntry          = 3
	objDataHashTable  = 4
	objFieldHashTable = 5
	objEntryArray     = 6

	stateOffline  = 0
	stateOnline   = 1
	stateArchived = 2

	// The first entry array of a chain holds 4 offsets; each next one
	// twice its predecessor's, as journald's.
	firstArrayItems = 4
)

// Header field offsets.
const (
	hState               = 16
	hFileID              = 24
	hMachineID           = 40
	hTailEntryBootID     = 56
	hSeqnumID            = 72
	hHeaderSize          = 88
	hArenaSize           = 96
	hDataHashTableOff    = 104
	hDataHashTableSize   = 112
	hFieldHashTableOff   = 120
	hFieldHashTableSize  = 128
	hTailObjectOffset    = 136
	hNObjects            = 144
	hNEntries            = 152
	hTailEntrySeqnum     = 160
	hHeadEntrySeqnum     = 168
	hEntryArrayOffset    = 176
	hHeadEntryRealtime   = 184
	hTailEntryRealtime   = 192
	hTailEntryMonotonic  = 200
	hNData               = 208
	hNFields             = 216
	hNTags               = 224
	hNEntryArrays        = 232
	hDataHashChainDepth  = 240
	hFieldHashChainDepth = 248
)

// ID128 is a 128-bit id as systemd's sd_id128_t: a machine's, a boot's.
type ID128 [16]byte

// ParseID128 reads an id in the 32-hex-digit form of /etc/machine-id and
// /proc/sys/kernel/random/boot_id (whose dashes it skips).
func ParseID128(s string) (ID128, error) {
	var id ID128
	h := make([]byte, 0, 32)
	for i := 0; i < len(s); i++ {
		if s[i] != '-' {
			h = append(h, s[i])
		}
	}
	if len(h) != 32 {
		return id, fmt.Errorf("%q is not a 128-bit id", s)
	}
	for i := range 16 {
		hi, lo := unhex(h[2*i]), unhex(h[2*i+1])
		if hi < 0 || lo < 0 {
			return id, fmt.Errorf("%q is not a 128-bit id", s)
		}
		id[i] = byte(hi<<4 | lo)
	}
	return id, nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}

// chain is an entry array chain: the entries of the file (the header's)
// or of one data object, in the order they were appended.
type chain struct {
	first, tail uint64 // the first and last array objects, 0 for none
	tailCap     uint64 // items the last array holds
	tailLen     uint64 // items in it so far
}

// dataObj is what linking an entry to a data object needs.
type dataObj struct {
	off, hash uint64
	nEntry    uint64 // entries that reference it
	entries   chain  // all of them but the first (entry_offset)
}

// field is a field object and the newest data object of its name.
type field struct{ off, head uint64 }

// Limits of what the writer keeps in memory.
const (
	// maxFields bounds the distinct field names of a file.
	maxFields = 256
	// maxShared bounds the cache of shared data objects; it is
	// emptied when full.
	maxShared = 128
	// unshared is the field whose every value is taken to be new: it
	// is looked up in the file, never cached.
	unshared = "MESSAGE"
	// maxKeptObject bounds the object buffer the writer keeps.
	maxKeptObject = 64 << 10
)

// Writer appends entries to one journal file.
type Writer struct {
	fd      int
	maxSize uint64

	machine, boot, fileID, seqnumID ID128

	end        uint64 // where the next object goes
	tailObject uint64
	nObjects   uint64
	nEntries   uint64
	nData      uint64
	nFields    uint64
	nArrays    uint64
	headSeqnum uint64
	tailSeqnum uint64
	headRealUs uint64
	tailRealUs uint64
	tailMonoUs uint64
	dataDepth  uint64
	fieldDepth uint64

	dataTable, dataBuckets   uint64 // the data hash table's items, and their number
	fieldTable, fieldBuckets uint64
	entries                  chain

	fields map[string]*field
	shared map[string]*dataObj // by payload

	buf []byte
	// obj is the reused buffer an object of at most maxKeptObject
	// bytes is written from: a new one per object was most of a line's
	// garbage in PID 1.
	obj []byte
}

// Options are a new file's identity.
type Options struct {
	// Machine is the machine the entries are from (_MACHINE_ID): the
	// pod's, which journalctl -M and the file's directory name.
	Machine ID128
	// Boot is the host's boot id: the entries' monotonic clock is the
	// host's.
	Boot ID128
	// SeqnumID, if set, continues the sequence of a file before this
	// one (Writer.SeqnumID, NextSeqnum); a new sequence otherwise.
	SeqnumID   ID128
	NextSeqnum uint64
	// MaxSize caps the file: at least 1 MiB.
	MaxSize uint64
}

// CreateAt makes a new journal file name in the directory dir (O_EXCL:
// never one that is there) and writes its header and hash tables.
func CreateAt(dir int, name string, opts Options) (*Writer, error) {
	if opts.MaxSize < 1<<20 {
		return nil, fmt.Errorf("journal file %s: size cap %d under 1 MiB", name, opts.MaxSize)
	}
	fd, err := unix.Openat(dir, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: name, Err: err}
	}
	w := &Writer{
		fd: fd, maxSize: opts.MaxSize,
		machine: opts.Machine, boot: opts.Boot, seqnumID: opts.SeqnumID,
		end: headerSize,
		// One bucket per 512 bytes of the file (3% of it): a
		// message's lookup walks a chain of one or two objects.
		dataBuckets:  max(2047, opts.MaxSize/512),
		fieldBuckets: 333,
		fields:       map[string]*field{},
		shared:       map[string]*dataObj{},
	}
	if opts.NextSeqnum > 1 {
		w.tailSeqnum = opts.NextSeqnum - 1
	}
	if _, err := rand.Read(w.fileID[:]); err != nil {
		w.abandon(dir, name)
		return nil, err
	}
	if w.seqnumID == (ID128{}) {
		w.seqnumID = w.fileID
	}
	if err := w.setUp(); err != nil {
		w.abandon(dir, name)
		return nil, fmt.Errorf("journal file %s: %w", name, err)
	}
	return w, nil
}

func (w *Writer) abandon(dir int, name string) {
	unix.Close(w.fd)
	_ = unix.Unlinkat(dir, name, 0)
}

// setUp writes the header, offline until both hash tables are there, then
// online.
func (w *Writer) setUp() error {
	if err := w.writeHeader(stateOffline); err != nil {
		return err
	}
	off, err := w.writeObject(objFieldHashTable, make([]byte, w.fieldBuckets*hashItemSize))
	if err != nil {
		return err
	}
	w.fieldTable = off + objHeaderSize
	off, err = w.writeObject(objDataHashTable, make([]byte, w.dataBuckets*hashItemSize))
	if err != nil {
		return err
	}
	w.dataTable = off + objHeaderSize
	return w.writeHeader(stateOnline)
}

// SeqnumID is the sequence id of the file's entries: the next file of a
// directory continues it (with NextSeqnum).
func (w *Writer) SeqnumID() ID128 { return w.seqnumID }

// NextSeqnum is the sequence number the next entry gets.
func (w *Writer) NextSeqnum() uint64 { return w.tailSeqnum + 1 }

// Head is the first entry's sequence number and realtime (microseconds),
// which an archived file's name holds; zeros for a file without entries.
func (w *Writer) Head() (seqnum, realtimeUs uint64) { return w.headSeqnum, w.headRealUs }

// Entries is how many entries the file holds.
func (w *Writer) Entries() uint64 { return w.nEntries }

// Flush makes the entries appended so far visible to readers: it writes
// the header, whose counters they read.
func (w *Writer) Flush() error { return w.writeHeader(stateOnline) }

// Close marks the file offline (archived if archive), makes it durable
// and closes it.
func (w *Writer) Close(archive bool) error {
	state := byte(stateOffline)
	if archive {
		state = stateArchived
	}
	err := w.writeHeader(state)
	if serr := unix.Fsync(w.fd); err == nil {
		err = serr
	}
	if cerr := unix.Close(w.fd); err == nil {
		err = cerr
	}
	return err
}

// Append adds one entry of fields, each "NAME=value" with a valid journal
// field name (ValidField), at the realtime and monotonic times given
// (each kept from going back before the last entry's). Readers see it at
// the next Flush.
func (w *Writer) Append(realtime time.Time, monotonic time.Duration, fields [][]byte) error {
	if len(fields) == 0 {
		return errors.New("journal entry without fields")
	}
	newNames := 0
	for _, f := range fields {
		if !ValidField(f) {
			return fmt.Errorf("journal field %.40q: not NAME=value with a valid name", f)
		}
		if _, ok := w.fields[string(f[:bytes.IndexByte(f, '=')])]; !ok {
			newNames++
		}
	}
	if len(w.fields)+newNames > maxFields {
		return fmt.Errorf("journal file: more than %d field names", maxFields)
	}
	if need := w.worstCase(fields); w.end+need > w.maxSize {
		return ErrFull
	}
	realUs := max(uint64(realtime.UnixMicro()), w.tailRealUs, 1)
	monoUs := max(uint64(monotonic.Microseconds()), w.tailMonoUs, 1)

	objs := make([]*dataObj, 0, len(fields))
	var xor uint64
	for _, f := range fields {
		d, err := w.dataObject(f)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(objs, func(o *dataObj) bool { return o.off == d.off }) {
			continue
		}
		objs = append(objs, d)
		xor ^= d.hash
	}
	slices.SortFunc(objs, func(a, b *dataObj) int { return cmpU64(a.off, b.off) })

	seq := w.tailSeqnum + 1
	b := w.scratch(entryHeaderSize - objHeaderSize + len(objs)*entryItemSize)
	le := binary.LittleEndian
	le.PutUint64(b[0:], seq)
	le.PutUint64(b[8:], realUs)
	le.PutUint64(b[16:], monoUs)
	copy(b[24:40], w.boot[:])
	le.PutUint64(b[40:], xor)
	for i, d := range objs {
		le.PutUint64(b[48+i*entryItemSize:], d.off)
		le.PutUint64(b[56+i*entryItemSize:], d.hash)
	}
	entry, err := w.writeObject(objEntry, b)
	if err != nil {
		return err
	}
	// Linked: first into every data object's list, then the file's,
	// which the header links (writeHeader).
	for _, d := range objs {
		if err := w.linkToData(d, entry); err != nil {
			return err
		}
	}
	if _, err := w.appendToChain(&w.entries, entry); err != nil {
		return err
	}
	w.nEntries++
	w.tailSeqnum = seq
	if w.headSeqnum == 0 {
		w.headSeqnum, w.headRealUs = seq, realUs
	}
	w.tailRealUs, w.tailMonoUs = realUs, monoUs
	return nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ValidField says whether f is "NAME=value" with a name journald takes:
// 1-64 of A-Z, 0-9 and '_', not starting with a digit.
func ValidField(f []byte) bool {
	i := bytes.IndexByte(f, '=')
	if i <= 0 || i > 64 || (f[0] >= '0' && f[0] <= '9') {
		return false
	}
	for _, c := range f[:i] {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

func align8(n uint64) uint64 { return (n + 7) &^ 7 }

// worstCase is the most an entry of fields can add to the file: each
// field a new data and field object, and the entry arrays of each data
// object and of the file grown by one array, which holds at most twice
// the file's entries.
func (w *Writer) worstCase(fields [][]byte) uint64 {
	n := align8(uint64(entryHeaderSize + len(fields)*entryItemSize))
	for _, f := range fields {
		name := f[:bytes.IndexByte(f, '=')]
		n += align8(uint64(dataHeaderSize+len(f))) + align8(uint64(fieldHeaderSize+len(name)))
	}
	grow := align8(uint64(arrayHeaderSize) + 8*max(2*w.nEntries+2, firstArrayItems))
	return n + grow*uint64(len(fields)+1)
}

// scratch is the reused buffer for one object's payload, zeroed.
func (w *Writer) scratch(n int) []byte {
	if cap(w.buf) < n {
		w.buf = make([]byte, n)
	}
	b := w.buf[:n]
	clear(b)
	return b
}

// writeObject appends an object of type t and the given payload (what
// follows the object header), with the padding that aligns the next.
func (w *Writer) writeObject(t byte, payload []byte) (uint64, error) {
	off := w.end
	size := uint64(objHeaderSize + len(payload))
	end := align8(off + size)
	var b []byte
	switch {
	case end-off > maxKeptObject:
		// The hash tables, written once: not kept.
		b = make([]byte, end-off)
	case cap(w.obj) < int(end-off):
		w.obj = make([]byte, end-off)
		fallthrough
	default:
		b = w.obj[:end-off]
	}
	clear(b[:objHeaderSize])
	clear(b[size:])
	b[0] = t
	binary.LittleEndian.PutUint64(b[8:], size)
	copy(b[objHeaderSize:], payload)
	if err := w.pwrite(b, off); err != nil {
		return 0, err
	}
	w.end = end
	w.tailObject = off
	w.nObjects++
	return off, nil
}

func (w *Writer) pwrite(b []byte, off uint64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(w.fd, b, int64(off))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("write journal file: %w", err)
		}
		b, off = b[n:], off+uint64(n)
	}
	return nil
}

// pread fills b from the file at off: the writer's own objects, whole.
func (w *Writer) pread(b []byte, off uint64) error {
	for len(b) > 0 {
		n, err := unix.Pread(w.fd, b, int64(off))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read journal file: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("read journal file: short at %d", off)
		}
		b, off = b[n:], off+uint64(n)
	}
	return nil
}

func (w *Writer) putU64(off, v uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return w.pwrite(b[:], off)
}

func (w *Writer) getU64(off uint64) (uint64, error) {
	var b [8]byte
	err := w.pread(b[:], off)
	return binary.LittleEndian.Uint64(b[:]), err
}

// dataObject finds or adds the data object of f.
func (w *Writer) dataObject(f []byte) (*dataObj, error) {
	eq := bytes.IndexByte(f, '=')
	cache := string(f[:eq]) != unshared
	if cache {
		if d, ok := w.shared[string(f)]; ok {
			return d, nil
		}
	}
	h := jenkinsHash64(f)
	off, depth, err := w.find(w.dataTable, w.dataBuckets, h, f, dataHeaderSize)
	if err != nil {
		return nil, err
	}
	var d *dataObj
	if off != 0 {
		w.dataDepth = max(w.dataDepth, depth)
		if d, err = w.readDataObj(off, h); err != nil {
			return nil, err
		}
	} else {
		w.dataDepth = max(w.dataDepth, depth+1)
		if d, err = w.addData(f, h); err != nil {
			return nil, err
		}
	}
	if cache {
		if len(w.shared) >= maxShared {
			clear(w.shared)
		}
		w.shared[string(f)] = d
	}
	return d, nil
}

// find walks the chain of hash h in the hash table at table for the
// object whose payload, after hdr bytes, is p; 0 if there is none. depth
// is the objects it passed.
func (w *Writer) find(table, buckets, h uint64, p []byte, hdr uint64) (off, depth uint64, err error) {
	off, err = w.getU64(table + (h%buckets)*hashItemSize)
	for ; err == nil && off != 0; depth++ {
		var b [objHeaderSize + 16]byte // the header, hash, next_hash_offset
		if err = w.pread(b[:], off); err != nil {
			break
		}
		le := binary.LittleEndian
		if le.Uint64(b[16:]) == h && le.Uint64(b[8:]) == hdr+uint64(len(p)) {
			q := make([]byte, len(p))
			if err = w.pread(q, off+hdr); err != nil {
				break
			}
			if bytes.Equal(q, p) {
				return off, depth + 1, nil
			}
		}
		off = le.Uint64(b[24:])
	}
	return 0, depth, err
}

// addData writes the data object of f, links it into the data hash table
// and at the head of its field's list.
func (w *Writer) addData(f []byte, h uint64) (*dataObj, error) {
	fl, err := w.fieldObject(f[:bytes.IndexByte(f, '=')])
	if err != nil {
		return nil, err
	}
	b := w.scratch(dataHeaderSize - objHeaderSize + len(f))
	le := binary.LittleEndian
	le.PutUint64(b[0:], h)
	le.PutUint64(b[16:], fl.head) // next_field_offset
	copy(b[48:], f)
	off, err := w.writeObject(objData, b)
	if err != nil {
		return nil, err
	}
	if err := w.linkHash(w.dataTable, w.dataBuckets, h, off); err != nil {
		return nil, err
	}
	if err := w.putU64(fl.off+objHeaderSize+16, off); err != nil {
		return nil, err
	}
	fl.head = off
	w.nData++
	return &dataObj{off: off, hash: h}, nil
}

// readDataObj reads back what linking an entry to the data object at off
// needs: its count, and the tail of its entry array chain.
func (w *Writer) readDataObj(off, h uint64) (*dataObj, error) {
	d := &dataObj{off: off, hash: h}
	var b [24]byte // entry_offset, entry_array_offset, n_entries
	if err := w.pread(b[:], off+objHeaderSize+24); err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	d.nEntry = le.Uint64(b[16:])
	d.entries.first = le.Uint64(b[8:])
	left := d.nEntry - min(d.nEntry, 1) // in the arrays
	for a := d.entries.first; a != 0; {
		var ah [arrayHeaderSize]byte
		if err := w.pread(ah[:], a); err != nil {
			return nil, err
		}
		capa := (le.Uint64(ah[8:]) - arrayHeaderSize) / 8
		next := le.Uint64(ah[16:])
		if next == 0 {
			d.entries.tail, d.entries.tailCap, d.entries.tailLen = a, capa, left
			break
		}
		left -= min(left, capa)
		a = next
	}
	return d, nil
}

// fieldObject finds or adds the field object of name.
func (w *Writer) fieldObject(name []byte) (*field, error) {
	if fl, ok := w.fields[string(name)]; ok {
		return fl, nil
	}
	h := jenkinsHash64(name)
	b := w.scratch(fieldHeaderSize - objHeaderSize + len(name))
	binary.LittleEndian.PutUint64(b[0:], h)
	copy(b[24:], name)
	off, err := w.writeObject(objField, b)
	if err != nil {
		return nil, err
	}
	if err := w.linkHash(w.fieldTable, w.fieldBuckets, h, off); err != nil {
		return nil, err
	}
	// Fields are few: their chain's depth is counted whole.
	depth := uint64(0)
	for o, err := w.getU64(w.fieldTable + (h%w.fieldBuckets)*hashItemSize); o != 0; depth++ {
		if err != nil {
			return nil, err
		}
		o, err = w.getU64(o + objHeaderSize + 8)
	}
	w.fieldDepth = max(w.fieldDepth, depth)
	fl := &field{off: off}
	w.fields[string(name)] = fl
	w.nFields++
	return fl, nil
}

// linkHash appends the object at off, of hash h, to its bucket's chain in
// the hash table whose items start at table.
func (w *Writer) linkHash(table, buckets, h, off uint64) error {
	item := table + (h%buckets)*hashItemSize
	tail, err := w.getU64(item + 8)
	if err != nil {
		return err
	}
	if tail != 0 {
		// next_hash_offset of the bucket's last object.
		err = w.putU64(tail+objHeaderSize+8, off)
	} else {
		err = w.putU64(item, off)
	}
	if err != nil {
		return err
	}
	return w.putU64(item+8, off)
}

// linkToData records that entry references d: its first entry goes in
// entry_offset, the others in its entry array chain.
func (w *Writer) linkToData(d *dataObj, entry uint64) error {
	if d.nEntry == 0 {
		if err := w.putU64(d.off+objHeaderSize+24, entry); err != nil {
			return err
		}
	} else {
		first, err := w.appendToChain(&d.entries, entry)
		if err != nil {
			return err
		}
		if first {
			if err := w.putU64(d.off+objHeaderSize+32, d.entries.first); err != nil {
				return err
			}
		}
	}
	d.nEntry++
	return w.putU64(d.off+objHeaderSize+40, d.nEntry)
}

// appendToChain adds entry to c, in a new array when the last is full;
// first says the chain was empty (the caller links its first array).
func (w *Writer) appendToChain(c *chain, entry uint64) (first bool, err error) {
	if c.tail != 0 && c.tailLen < c.tailCap {
		if err := w.putU64(c.tail+arrayHeaderSize+8*c.tailLen, entry); err != nil {
			return false, err
		}
		c.tailLen++
		return false, nil
	}
	n := uint64(firstArrayItems)
	if c.tail != 0 {
		n = 2 * c.tailCap
	}
	b := w.scratch(int(arrayHeaderSize - objHeaderSize + 8*n))
	binary.LittleEndian.PutUint64(b[8:], entry)
	off, err := w.writeObject(objEntryArray, b)
	if err != nil {
		return false, err
	}
	w.nArrays++
	if c.tail != 0 {
		// next_entry_array_offset of the array before.
		if err := w.putU64(c.tail+objHeaderSize, off); err != nil {
			return false, err
		}
	}
	first = c.tail == 0
	if first {
		c.first = off
	}
	c.tail, c.tailCap, c.tailLen = off, n, 1
	return first, nil
}

// writeHeader writes the whole header from the writer's state.
func (w *Writer) writeHeader(state byte) error {
	var b [headerSize]byte
	le := binary.LittleEndian
	copy(b[0:8], "LPKSHHRH")
	b[hState] = state
	copy(b[hFileID:], w.fileID[:])
	copy(b[hMachineID:], w.machine[:])
	copy(b[hTailEntryBootID:], w.boot[:])
	copy(b[hSeqnumID:], w.seqnumID[:])
	le.PutUint64(b[hHeaderSize:], headerSize)
	le.PutUint64(b[hArenaSize:], w.end-headerSize)
	if w.dataTable != 0 {
		le.PutUint64(b[hDataHashTableOff:], w.dataTable)
		le.PutUint64(b[hDataHashTableSize:], w.dataBuckets*hashItemSize)
	}
	if w.fieldTable != 0 {
		le.PutUint64(b[hFieldHashTableOff:], w.fieldTable)
		le.PutUint64(b[hFieldHashTableSize:], w.fieldBuckets*hashItemSize)
	}
	le.PutUint64(b[hTailObjectOffset:], w.tailObject)
	le.PutUint64(b[hNObjects:], w.nObjects)
	le.PutUint64(b[hNEntries:], w.nEntries)
	if w.nEntries > 0 {
		le.PutUint64(b[hTailEntrySeqnum:], w.tailSeqnum)
		le.PutUint64(b[hHeadEntrySeqnum:], w.headSeqnum)
		le.PutUint64(b[hHeadEntryRealtime:], w.headRealUs)
		le.PutUint64(b[hTailEntryRealtime:], w.tailRealUs)
		le.PutUint64(b[hTailEntryMonotonic:], w.tailMonoUs)
	}
	le.PutUint64(b[hEntryArrayOffset:], w.entries.first)
	le.PutUint64(b[hNData:], w.nData)
	le.PutUint64(b[hNFields:], w.nFields)
	le.PutUint64(b[hNEntryArrays:], w.nArrays)
	le.PutUint64(b[hDataHashChainDepth:], w.dataDepth)
	le.PutUint64(b[hFieldHashChainDepth:], w.fieldDepth)
	return w.pwrite(b[:], 0)
}
