package images

import (
	"bufio"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/appc/spec/schema/types"
	"github.com/pod1/pod1/safefile"
	"golang.org/x/sys/unix"
)

// idFile holds the appc image id (sha512 of the uncompressed tar) next to
// manifest and rootfs in a store entry, so a cache hit does not have to
// decompress the file again to learn it.
const idFile = "imageid"

// OpenFile opens an ACI file. It is unpacked into storeDir/<id>, where id is
// the first 64 hex digits of the sha512 of the file, unless an earlier run
// already did so. Unpacking happens in a temporary directory beside the entry
// that is renamed into place only when complete, so a crash never leaves a
// half-extracted image under a valid id, and two concurrent runs extracting
// the same file both end up using one complete entry.
func OpenFile(path, storeDir string) (*Image, error) {
	return openFile(path, storeDir, DefaultLimits)
}

func openFile(path, storeDir string, lim Limits) (*Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", path, err)
	}
	defer f.Close()
	// The file is hashed (every byte read) unless it is the very file an
	// earlier run hashed, unchanged since (known.go), and that run's store
	// entry is still there.
	now := time.Now()
	ident, identErr := identityOf(f)
	storeID, known := "", false
	if identErr == nil {
		storeID, known = knownStoreID(storeDir, ident)
	}
	if known {
		if _, err := os.Lstat(filepath.Join(storeDir, storeID)); err != nil {
			known = false
		}
	}
	if !known {
		h := sha512.New()
		if _, err := io.Copy(h, f); err != nil {
			return nil, fmt.Errorf("image %s: hash: %w", path, err)
		}
		storeID = hex.EncodeToString(h.Sum(nil))[:keyHexLen]
	}
	entry := filepath.Join(storeDir, storeID)

	if _, err := os.Lstat(entry); errors.Is(err, fs.ErrNotExist) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, fmt.Errorf("image %s: %w", path, err)
		}
		if err := unpack(f, storeDir, storeID, lim); err != nil {
			return nil, fmt.Errorf("image %s: %w", path, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("image %s: store entry: %w", path, err)
	}

	raw, m, err := loadManifest(entry, true)
	if err != nil {
		return nil, fmt.Errorf("image %s: store entry %s: %w", path, entry, err)
	}
	id, err := readID(entry)
	if err != nil {
		return nil, fmt.Errorf("image %s: store entry %s: %w", path, entry, err)
	}
	if !known && identErr == nil {
		// Only a file that did not change while it was read is recorded.
		if after, err := identityOf(f); err == nil && after == ident {
			rememberStoreID(storeDir, ident, storeID, now)
		}
	}
	return &Image{
		Source:       path,
		Dir:          entry,
		Manifest:     m,
		ManifestJSON: raw,
		ID:           id,
		TreeStoreID:  storeID,
	}, nil
}

// unpack extracts r into a fresh temporary directory and renames it to
// storeDir/storeID.
func unpack(r io.Reader, storeDir, storeID string, lim Limits) (retErr error) {
	// 0700: the store holds image trees with their setuid binaries intact,
	// which unprivileged users must not reach.
	if err := os.MkdirAll(storeDir, 0o700); err != nil {
		return fmt.Errorf("create store: %w", err)
	}
	tmp, err := os.MkdirTemp(storeDir, ".tmp-"+storeID[:16]+"-")
	if err != nil {
		return fmt.Errorf("create temporary store entry: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(tmp)
		}
	}()

	dr, err := decompress(r)
	if err != nil {
		return err
	}
	h := sha512.New()
	tee := io.TeeReader(dr, h)
	if err := ExtractLimited(tee, tmp, lim); err != nil {
		return err
	}
	// The tar reader stops at the end-of-archive marker; the image id is
	// defined over the whole uncompressed stream, trailing padding included.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return fmt.Errorf("read archive: %w", err)
	}
	if _, _, err := loadManifest(tmp, true); err != nil {
		return err
	}
	id := "sha512-" + hex.EncodeToString(h.Sum(nil))[:keyHexLen]
	if err := os.WriteFile(filepath.Join(tmp, idFile), []byte(id), 0o600); err != nil {
		return fmt.Errorf("write image id: %w", err)
	}
	if err := syncfs(tmp); err != nil {
		return err
	}

	if err := os.Rename(tmp, filepath.Join(storeDir, storeID)); err != nil {
		if isExist(err) {
			// A concurrent run finished first; its entry is as good as
			// ours. Returning an error would be wrong, so drop ours here.
			_ = os.RemoveAll(tmp)
			return nil
		}
		return fmt.Errorf("rename store entry into place: %w", err)
	}
	return safefile.SyncDirs(storeDir)
}

// decompress sniffs the compression from the first bytes, as rkt does; an
// ACI file's name says nothing reliable about it.
func decompress(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(6) // a short read just means "not compressed"
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, nil
	case bytes.HasPrefix(magic, []byte("BZh")):
		return bzip2.NewReader(br), nil
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return nil, fmt.Errorf("%w: xz", ErrCompression)
	default:
		return br, nil
	}
}

func readID(entry string) (types.Hash, error) {
	raw, err := os.ReadFile(filepath.Join(entry, idFile))
	if err != nil {
		return types.Hash{}, fmt.Errorf("read image id: %w", err)
	}
	h, err := types.NewHash(strings.TrimSpace(string(raw)))
	if err != nil {
		return types.Hash{}, fmt.Errorf("parse image id: %w", err)
	}
	return *h, nil
}

// syncfs flushes the file system holding dir, so the rename that publishes
// an entry cannot reach the disk before the files it names.
func syncfs(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync store entry: %w", err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("sync store entry: %w", err)
	}
	return nil
}
