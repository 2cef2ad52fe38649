// Package entrypoint is the one resolver of a stage1's entry points (the
// stage1 manifest's coreos.com/rkt/stage1/* annotations, contract §1) for
// every host-side caller that runs one as root: pod1 run, stop, enter,
// gc and the app operations.
//
// An entry point is what its annotation declares, as rkt's stage0 reads
// it (a stage1 without the annotation has no such entry point), found
// inside the stage1's rootfs with every symlink on its way resolved there
// (securejoin), so that neither the annotation nor a symlink in the tree
// can lead a command run as root to a file of the host; and it must be a
// regular executable file. The tree itself is code the host's root chose
// to run: what is refused is leaving it.
package entrypoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"

	"github.com/pod1/pod1/layout"
	"github.com/pod1/pod1/safefile"
)

var (
	// ErrNotDeclared means the stage1 manifest has no annotation for
	// the entry point.
	ErrNotDeclared = errors.New("not declared by the stage1")
	// ErrEscape means the annotation's path climbs out of the rootfs.
	ErrEscape = errors.New("path leaves the stage1 rootfs")
	// ErrNotExecutable means the entry point, resolved in the rootfs,
	// is not a regular executable file there.
	ErrNotExecutable = errors.New("not an executable file in the stage1 rootfs")
)

// Stage1 is what a stage1 manifest declares of its entry points.
type Stage1 struct {
	ann map[string]string
}

// New takes the stage1 manifest's annotations, by name.
func New(annotations map[string]string) *Stage1 {
	return &Stage1{ann: annotations}
}

// Parse reads a stage1 image manifest's annotations.
func Parse(manifest []byte) (*Stage1, error) {
	var m struct {
		Annotations []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"annotations"`
	}
	if err := json.Unmarshal(manifest, &m); err != nil {
		return nil, fmt.Errorf("stage1 manifest: %w", err)
	}
	ann := make(map[string]string, len(m.Annotations))
	for _, a := range m.Annotations {
		ann[a.Name] = a.Value
	}
	return New(ann), nil
}

// ReadPod reads the pod's copy of the stage1 manifest, which the pod
// directory holds.
func ReadPod(podDir string) (*Stage1, error) {
	b, err := safefile.ReadRegularIn(podDir, layout.Stage1Manifest, layout.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("stage1 manifest: %w", err)
	}
	return Parse(b)
}

// Version is the stage1's interface version: 1 when the manifest does not
// say (rkt stage0/manifest.go).
func (s *Stage1) Version() (int, error) {
	v, ok := s.ann[layout.AnnInterfaceVersion]
	if !ok {
		return 1, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("annotation %s=%q: not a positive integer", layout.AnnInterfaceVersion, v)
	}
	return n, nil
}

// Name is the entry point's short name for messages: "stop", "app/add".
func Name(annotation string) string {
	return strings.TrimPrefix(annotation, "coreos.com/rkt/stage1/")
}

// Path is the entry point the annotation declares, as an absolute path
// inside the stage1 rootfs.
func (s *Stage1) Path(annotation string) (string, error) {
	v := s.ann[annotation]
	if v == "" {
		return "", fmt.Errorf("%s entrypoint: %w (no %s annotation)", Name(annotation), ErrNotDeclared, annotation)
	}
	for _, part := range strings.Split(v, "/") {
		if part == ".." {
			return "", fmt.Errorf("%s entrypoint: annotation %s=%q: %w", Name(annotation), annotation, v, ErrEscape)
		}
	}
	return path.Clean("/" + v), nil
}

// Resolve finds the entry point the annotation declares in the stage1
// rootfs root. It returns the file to execute, every symlink on its way
// resolved inside root, and the argv[0] rkt's stage0 gives it (root and
// the declared path, unresolved: a stage1 may pick its role from it).
func (s *Stage1) Resolve(annotation, root string) (file, argv0 string, err error) {
	ep, err := s.Path(annotation)
	if err != nil {
		return "", "", err
	}
	file, err = In(root, ep)
	if err != nil {
		return "", "", fmt.Errorf("%s entrypoint %s: %w", Name(annotation), ep, err)
	}
	return file, filepath.Join(root, ep), nil
}

// ResolvePod is Resolve in the pod's stage1 rootfs.
func (s *Stage1) ResolvePod(annotation, podDir string) (file, argv0 string, err error) {
	return s.Resolve(annotation, filepath.Join(podDir, layout.Stage1RootFS))
}

// In resolves the absolute path ep inside root, symlinks included, and
// checks that it names a regular executable file there.
func In(root, ep string) (string, error) {
	file, err := securejoin.SecureJoin(root, ep)
	if err != nil {
		return "", err
	}
	fi, err := os.Lstat(file)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", ErrNotExecutable
	}
	return file, nil
}
