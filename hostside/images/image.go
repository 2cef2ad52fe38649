// Package images reads appc ACI images for pod1. An ACI file (a tar,
// optionally gzip- or bzip2-compressed) is unpacked once into pod1's image
// store; an ACI directory (a directory holding "manifest" and "rootfs/") is
// used where it is. Either way the caller gets an Image: the parsed manifest,
// its raw bytes, the directory holding both, and the ids a pod dir records.
package images

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/appc/spec/schema"
	"github.com/appc/spec/schema/types"
	"golang.org/x/sys/unix"

	"github.com/pod1/pod1/layout"
)

const (
	// ManifestFile is the name of the image manifest inside an ACI.
	ManifestFile = "manifest"
	// RootfsDir is the name of the root filesystem directory inside an ACI.
	RootfsDir = "rootfs"

	// keyHexLen is how many hex digits of a sha512 we keep in ids, the same
	// length rkt uses for its store keys ("sha512-" + 64 hex digits).
	keyHexLen = 64
)

// Image is an ACI ready to be rendered into a pod.
type Image struct {
	// Source is the path the caller gave (ACI file or ACI directory).
	Source string
	// Dir is the absolute directory holding ManifestFile and RootfsDir:
	// the store entry for an ACI file, the directory itself otherwise.
	Dir string
	// Manifest is the parsed and validated image manifest.
	Manifest *schema.ImageManifest
	// ManifestJSON is the manifest exactly as stored in the image; pods get
	// these bytes, as rkt copies the stored manifest verbatim.
	ManifestJSON []byte
	// ID is the appc image id: sha512 of the uncompressed tar for an ACI
	// file; for an ACI directory, which has no archive, sha512 of its
	// manifest.
	ID types.Hash
	// TreeStoreID names the rendered tree: the store directory name for an
	// ACI file, "dir-<hash of the path>" for an ACI directory. Pod dirs
	// record it (stage1TreeStoreID, appsinfo/<app>/treeStoreID) and use it
	// to name overlay/<TreeStoreID>/.
	TreeStoreID string
}

// Rootfs returns the image's root filesystem directory.
func (im *Image) Rootfs() string { return filepath.Join(im.Dir, RootfsDir) }

// Open opens the ACI at path. A directory is used in place; anything else is
// read as an ACI file and unpacked, once, into storeDir.
func Open(path, storeDir string) (*Image, error) {
	return OpenLimited(path, storeDir, DefaultLimits)
}

// OpenLimited is Open with the bounds an ACI file is unpacked within.
func OpenLimited(path, storeDir string, lim Limits) (*Image, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", path, err)
	}
	if fi.IsDir() {
		return OpenDir(path)
	}
	return openFile(path, storeDir, lim)
}

// OpenDir opens an ACI directory without copying it.
func OpenDir(dir string) (*Image, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", dir, err)
	}
	raw, m, err := loadManifest(abs, false)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", dir, err)
	}
	// The path, not the content, names the tree: hashing a whole rootfs on
	// every run would be slow, and overlay dirs only need a stable name.
	pathSum := sha512.Sum512([]byte(abs))
	return &Image{
		Source:       dir,
		Dir:          abs,
		Manifest:     m,
		ManifestJSON: raw,
		ID:           hashID(sha512.Sum512(raw)),
		TreeStoreID:  "dir-" + hex.EncodeToString(pathSum[:])[:keyHexLen],
	}, nil
}

// loadManifest reads and validates dir/manifest and checks that dir/rootfs is
// a directory. For store entries the manifest is opened with O_NOFOLLOW:
// extraction only ever creates a regular file there, so a symlink means the
// entry was tampered with and following it could read a host file.
func loadManifest(dir string, noFollow bool) ([]byte, *schema.ImageManifest, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC
	if noFollow {
		flags |= unix.O_NOFOLLOW
	}
	f, err := os.OpenFile(filepath.Join(dir, ManifestFile), flags, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: manifest: %w", ErrNotACI, err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, layout.MaxFileSize+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read manifest: %w", err)
	}
	if len(raw) > layout.MaxFileSize {
		return nil, nil, fmt.Errorf("manifest exceeds %d bytes", layout.MaxFileSize)
	}
	var m schema.ImageManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("invalid manifest: %w", err)
	}
	fi, err := os.Stat(filepath.Join(dir, RootfsDir))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: rootfs: %w", ErrNotACI, err)
	}
	if !fi.IsDir() {
		return nil, nil, fmt.Errorf("%w: rootfs is not a directory", ErrNotACI)
	}
	return raw, &m, nil
}

// hashID turns a sha512 sum into an appc hash in rkt's store-key form.
func hashID(sum [sha512.Size]byte) types.Hash {
	h, err := types.NewHash("sha512-" + hex.EncodeToString(sum[:])[:keyHexLen])
	if err != nil {
		// NewHash only rejects malformed type prefixes; ours is constant.
		panic(err)
	}
	return *h
}

// CheckApp applies rkt's extra checks for app (not stage1) images: the os
// and arch labels must be present (stage0/run.go: prepareAppImage); their
// values were already validated when the manifest was parsed.
func (im *Image) CheckApp() error {
	for _, l := range []string{"os", "arch"} {
		if _, ok := im.Manifest.Labels.Get(l); !ok {
			return fmt.Errorf("image %s: missing %s label in the image manifest", im.Source, l)
		}
	}
	return nil
}

// isExist reports whether err says the rename target already exists, which
// rename(2) reports as EEXIST or ENOTEMPTY for a non-empty directory.
func isExist(err error) bool {
	return errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY)
}
