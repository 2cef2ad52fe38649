# pod1: a stage1 for rkt. `make` builds the static binaries into bin/,
# `make image` the stage1 ACI, `sudo make demo` runs a demo pod,
# `make test-unit` runs the unit tests (as any user) and `sudo make test`
# the unit and integration tests (as root).

GO        ?= go
# pod1's version, from git: every binary knows it and it is the stage1
# image's version label, which rkt caches the image under (with its name).
# A version rkt has cached is not fetched again, so each commit must be a
# new one; rkt fetches a version ending in -dirty every time.
VERSION   ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
GOFLAGS_B := -trimpath -tags "netgo osusergo" -ldflags "-s -w -X main.version=$(VERSION)"
export CGO_ENABLED := 0

# The real rkt v1.30.0 stage0 the tests drive pod1 through (see rkt: below).
RKT := build/rkt/rkt

BINS := bin/stage1-init bin/pod1-init bin/pod1-waiter bin/pod1-pause bin/net-setup bin/pod1 bin/probe bin/demo-hello
SRCS := $(shell find . -name '*.go' -not -path './build/*') go.mod go.sum

.PHONY: deps FORCE all image demo test test-unit test-race lint tools check-static clean bench bench-ab vm-test rkt test-helpers conformance \
	vm-conformance install install-default-stage1 uninstall uninstall-default-stage1

all: $(BINS)

# deps installs the Debian packages the build and the tests need when they
# are missing and we are root (tools/host-deps.sh); otherwise it names them.
deps:
	@tools/host-deps.sh
FORCE:

# The binaries and the image are rebuilt when the version changes (a
# commit that touches no source) or the install's image directory, which
# pod1 knows: the stamp holds the ones they carry.
VERSION_STAMP := build/.version
$(VERSION_STAMP): FORCE
	@case '$(VERSION)' in ''|*[!A-Za-z0-9._+~-]*) echo "VERSION='$(VERSION)': want letters, digits and . _ + ~ -"; exit 1;; esac
	@mkdir -p build; echo '$(VERSION) $(STAGE1_IMAGES_DIR)' | cmp -s - $@ || echo '$(VERSION) $(STAGE1_IMAGES_DIR)' > $@
SRCS += $(VERSION_STAMP)

# The host side of the stage1: run and the other entry points rkt runs.
bin/stage1-init: $(SRCS)
	$(GO) build $(GOFLAGS_B) -o $@ ./stage1-init/cmd/stage1-init
# The start-path binary: PID 1 and the apps' set-up only, so that neither
# links nor initialises what only run and the host side need. run execs
# it, from next to itself, as the pod's PID 1.
bin/pod1-init: $(SRCS)
	$(GO) build $(GOFLAGS_B) -o $@ ./stage1-init/cmd/pod1-init
# The waiter (waiter/waiter.c) is the run entry point: the process that holds
# the pod's lock and waits is C, not a Go runtime; it starts the Go run as
# its child, and is the lock keeper too. Built static with the system's gcc
# against musl (Debian's musl-tools): a static glibc program probes the
# CPU (cpuid, for its string functions and cache sizes) before main, which
# traps to the hypervisor on a paravirtualised machine, and faults in more
# pages; the waiter and the lock keeper are on the pod's start path, and
# stay resident (docs/design-start.md). Without musl-gcc, or with
# WAITER_CC=gcc, it is built against glibc (libc6-dev) instead: it works
# the same, slower to start and larger (TestWaiterAndKeeperAreSmall says
# so).
WAITER_CC ?= $(if $(shell command -v musl-gcc 2>/dev/null),musl-gcc,gcc)
# The waiter is rebuilt when the compiler changes (musl-tools installed
# after a build against glibc): the stamp holds the one it was built with.
WAITER_CC_STAMP := build/.waiter-cc
$(WAITER_CC_STAMP): FORCE | deps
	@mkdir -p build; echo '$(WAITER_CC)' | cmp -s - $@ || echo '$(WAITER_CC)' > $@
bin/pod1-waiter: waiter/waiter.c waiter/handover.h waiter/tricks.h $(WAITER_CC_STAMP)
	@mkdir -p bin
	@command -v $(WAITER_CC) >/dev/null 2>&1 || { echo "bin/pod1-waiter: no C compiler ($(WAITER_CC)): install Debian's gcc and musl-tools (sudo apt-get install gcc musl-tools), or build with WAITER_CC=gcc (and libc6-dev)"; exit 1; }
	$(WAITER_CC) -static -Os -s -Wall -Wextra -Werror -o $@ waiter/waiter.c
# The init of the apps' pid namespace (pause/pause.c): C for the same
# reason as the waiter, a process that stays for the pod's whole life and
# only reaps.
bin/pod1-pause: pause/pause.c waiter/handover.h $(WAITER_CC_STAMP)
	@mkdir -p bin
	@command -v $(WAITER_CC) >/dev/null 2>&1 || { echo "bin/pod1-pause: no C compiler ($(WAITER_CC)): install Debian's gcc and musl-tools (sudo apt-get install gcc musl-tools), or build with WAITER_CC=gcc (and libc6-dev)"; exit 1; }
	$(WAITER_CC) -static -Os -s -Wall -Wextra -Werror -o $@ pause/pause.c
bin/net-setup: $(SRCS)
	$(GO) build $(GOFLAGS_B) -o $@ ./stage1-net
# pod1 knows the Go build ID of the stage1-init built with it: `pod1 gc`
# does that stage1's gc work in its own process (hostside/gc/own.go).
bin/pod1: $(SRCS) bin/stage1-init
	$(GO) build -trimpath -tags "netgo osusergo" -ldflags "-s -w -X main.version=$(VERSION) \
		-X main.installedStage1=$(STAGE1_IMAGES_DIR)/$(STAGE1_ACI_NAME) \
		-X github.com/pod1/pod1/hostside/gc.ownStage1BuildID=$$($(GO) tool buildid bin/stage1-init)" -o $@ ./hostside/pod1
bin/probe: $(SRCS)
	$(GO) build $(GOFLAGS_B) -o $@ ./tests/probe
bin/demo-hello: $(SRCS)
	$(GO) build $(GOFLAGS_B) -o $@ ./demo/hello

image: build/stage1.aci build/demo-hello.aci

# The CNI plugins the stage1 ships, built static from the pinned release.
# They depend on nothing of ours: built once per worktree (and version).
CNI_PLUGINS_VERSION := v1.10.0
CNI_PLUGINS := ptp bridge macvlan ipvlan loopback host-local portmap
CNI_DIR := build/cni-plugins-$(CNI_PLUGINS_VERSION)-flannel
CNI_PKG = github.com/containernetworking/plugins/plugins/$(if $(filter host-local,$(1)),ipam,$(if $(filter portmap,$(1)),meta,main))/$(1)@$(CNI_PLUGINS_VERSION)

# flannel left containernetworking/plugins after v0.9.1 (its own module
# is not served): that release's, which delegates to the v1.10.0 bridge.
FLANNEL_VERSION := v0.9.1
FLANNEL_PKG := github.com/containernetworking/plugins/plugins/meta/flannel@$(FLANNEL_VERSION)

$(CNI_DIR)/.done:
	rm -rf $(CNI_DIR) && mkdir -p $(CNI_DIR)
	GOBIN=$(abspath $(CNI_DIR)) GOFLAGS=-buildvcs=false $(GO) install -trimpath -ldflags "-s -w" $(foreach p,$(CNI_PLUGINS),$(call CNI_PKG,$(p)))
	GOBIN=$(abspath $(CNI_DIR)) GOFLAGS=-buildvcs=false $(GO) install -trimpath -ldflags "-s -w" $(FLANNEL_PKG)
	touch $@

# The images are packed reproducibly: the same files give the same bytes,
# so an image's digest (rkt's image ID, the stage1 sha256 a conformance run
# records) names its content, whenever and wherever it was built.
REPRO_TAR := --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner

build/stage1.aci: bin/stage1-init bin/pod1-init bin/pod1-waiter bin/pod1-pause bin/net-setup $(CNI_DIR)/.done rootfs/manifest.json rootfs/hosts-fallback $(wildcard rootfs/net.d/*.conf) Makefile $(VERSION_STAMP)
	rm -rf build/stage1 && mkdir -p build/stage1/rootfs/rkt/status build/stage1/rootfs/rkt/env build/stage1/rootfs/opt/stage2 \
		build/stage1/rootfs/etc/rkt/net.d build/stage1/rootfs/usr/lib/rkt/plugins/net
	sed 's|"name": "version", "value": "[^"]*"|"name": "version", "value": "$(VERSION)"|' rootfs/manifest.json > build/stage1/manifest
	grep -q '"value": "$(VERSION)"' build/stage1/manifest
	cp rootfs/hosts-fallback build/stage1/rootfs/etc/hosts-fallback
	cp bin/stage1-init build/stage1/rootfs/stage1-init
	cp bin/pod1-init build/stage1/rootfs/pod1-init
	cp bin/pod1-waiter build/stage1/rootfs/pod1-waiter
	cp bin/pod1-pause build/stage1/rootfs/pod1-pause
	cp bin/net-setup build/stage1/rootfs/net-setup
	cp rootfs/net.d/*.conf build/stage1/rootfs/etc/rkt/net.d/
	cp $(addprefix $(CNI_DIR)/,$(CNI_PLUGINS) flannel) build/stage1/rootfs/usr/lib/rkt/plugins/net/
	for ep in stop gc enter app-add app-start app-stop app-rm attach; do ln -s stage1-init build/stage1/rootfs/$$ep; done
	ln -s pod1-waiter build/stage1/rootfs/run
	tar $(REPRO_TAR) -C build/stage1 -cf $@.tmp manifest rootfs && mv $@.tmp $@

build/demo-hello.aci: bin/demo-hello demo/manifest.json demo/passwd demo/group Makefile
	rm -rf build/demo-hello && mkdir -p build/demo-hello/rootfs/bin build/demo-hello/rootfs/etc build/demo-hello/rootfs/tmp
	cp demo/manifest.json build/demo-hello/manifest
	cp bin/demo-hello build/demo-hello/rootfs/bin/hello
	cp demo/passwd build/demo-hello/rootfs/etc/passwd
	cp demo/group build/demo-hello/rootfs/etc/group
	tar $(REPRO_TAR) -C build/demo-hello -cf $@.tmp manifest rootfs && mv $@.tmp $@

# check-static fails if any binary is dynamically linked: rkt execs the
# entry points on the host, where no loader of ours exists.
check-static: $(BINS) $(CNI_DIR)/.done
	@for b in $(BINS) $(addprefix $(CNI_DIR)/,$(CNI_PLUGINS) flannel); do \
		if ldd $$b >/dev/null 2>&1; then echo "$$b is not static"; exit 1; fi; \
	done; echo "all binaries are static"

# make install puts pod1 (the host CLI) in $(PREFIX)/bin and the stage1
# image where rkt looks for stage1 images: rkt's built-in stage1 images
# directory (its configure's --with-stage1-default-images-directory,
# /usr/lib/rkt/stage1-images unless changed, as tools/rkt-stage0 builds
# it), whose images rkt runs without a signature. make install-default-stage1 also writes the stage1.d entry
# (rkt's Documentation/configuration.md) that makes the installed image
# rkt's default stage1, under its name and this build's version: rkt runs
# the image it has cached under that name and version, and fetches it from
# the location only for a version it has not seen. make uninstall removes
# all three; make uninstall-default-stage1 only the entry, which gives rkt
# back its own default. DESTDIR stages the files under another root; the
# entry names the image where it will be, without DESTDIR.
PREFIX            ?= /usr/local
STAGE1_IMAGES_DIR ?= /usr/lib/rkt/stage1-images
RKT_CONFIG_DIR    ?= /etc/rkt
STAGE1_IMAGE_NAME := pod1.dev/stage1
STAGE1_ACI_NAME   := stage1-pod1.aci
STAGE1_ENTRY      := $(DESTDIR)$(RKT_CONFIG_DIR)/stage1.d/pod1.json

install: bin/pod1 build/stage1.aci
	@for d in '$(PREFIX)' '$(STAGE1_IMAGES_DIR)'; do case $$d in /*) ;; *) echo "install: $$d is not an absolute path"; exit 1;; esac; done
	install -d '$(DESTDIR)$(PREFIX)/bin' '$(DESTDIR)$(STAGE1_IMAGES_DIR)'
	install -m 0755 bin/pod1 '$(DESTDIR)$(PREFIX)/bin/pod1'
	install -m 0644 build/stage1.aci '$(DESTDIR)$(STAGE1_IMAGES_DIR)/$(STAGE1_ACI_NAME).tmp'
	mv -f '$(DESTDIR)$(STAGE1_IMAGES_DIR)/$(STAGE1_ACI_NAME).tmp' '$(DESTDIR)$(STAGE1_IMAGES_DIR)/$(STAGE1_ACI_NAME)'

# rkt refuses to start at all when two entries of one stage1.d set the
# same field, so another entry there is named, not joined.
install-default-stage1: install
	@case '$(RKT_CONFIG_DIR)$(STAGE1_IMAGES_DIR)' in *[\"\'\\]*) echo "install-default-stage1: no quotes or backslashes in RKT_CONFIG_DIR or STAGE1_IMAGES_DIR"; exit 1;; esac
	@for f in '$(dir $(STAGE1_ENTRY))'*.json; do \
		if [ -e "$$f" ] && [ "$$f" != '$(STAGE1_ENTRY)' ]; then \
			echo "install-default-stage1: $$f also names rkt's default stage1: move it away first"; exit 1; \
		fi; \
	done
	install -d '$(dir $(STAGE1_ENTRY))'
	printf '{\n\t"rktKind": "stage1",\n\t"rktVersion": "v1",\n\t"name": "%s",\n\t"version": "%s",\n\t"location": "%s"\n}\n' \
		'$(STAGE1_IMAGE_NAME)' '$(VERSION)' '$(STAGE1_IMAGES_DIR)/$(STAGE1_ACI_NAME)' > '$(STAGE1_ENTRY).tmp'
	chmod 0644 '$(STAGE1_ENTRY).tmp' && mv -f '$(STAGE1_ENTRY).tmp' '$(STAGE1_ENTRY)'

uninstall-default-stage1:
	rm -f '$(STAGE1_ENTRY)'

uninstall: uninstall-default-stage1
	rm -f '$(DESTDIR)$(PREFIX)/bin/pod1' '$(DESTDIR)$(STAGE1_IMAGES_DIR)/$(STAGE1_ACI_NAME)'

demo: deps all image
	./demo/run.sh

# make test runs every test: the unit tests and the integration tests that
# start real pods. It needs root: run as an ordinary user it fails with a
# clear message rather than pass with the root tests skipped (make
# test-unit is what runs as any user).
test: deps all image check-static $(RKT)
	@if [ "$$(id -u)" != 0 ]; then echo "make test needs root (sudo make test): the tests start real pods"; exit 1; fi
	POD1_RKT=$(abspath $(RKT)) $(GO) test -count=1 -timeout 14m ./...

# The unit packages: every package but tests/, whose integration tests
# start real pods from bin/ and build/.
UNIT_PKGS = $(shell $(GO) list ./... | grep -v -e '/tests$$')

# make test-unit runs the unit packages' tests as any user, with Go alone:
# nothing is built or installed first. A test that needs root (a mount, a
# cgroup, a namespace, a chown) skips, with one line saying why, when it
# is not; as root it runs, as in make test.
test-unit:
	$(GO) test -count=1 -timeout 10m $(UNIT_PKGS)

# make test-race runs the unit packages under the race detector. The race
# detector needs cgo, and the stage1's binaries must be static (they run
# inside pods that have no loader of ours), so the pods of the integration
# tests run the ordinary binaries: tests/ is left out. Root, as make test.
test-race:
	@if [ "$$(id -u)" != 0 ]; then echo "make test-race needs root (sudo make test-race): the unit tests of reaper, cgroups and gc do"; exit 1; fi
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 10m $(UNIT_PKGS)

# The real rkt v1.30.0 stage0, built from the Go module proxy alone by
# tools/rkt-stage0/build.sh (its go.mod pins rkt's glide.lock commits): the
# tests in tests/rkt_*_test.go drive pod1 through it. It is kept in build/
# and rebuilt only when missing or when the build files change (about 2
# minutes cold, seconds with Go's caches warm). Without a reachable module
# proxy the build, and so `make test`, fails.
rkt: $(RKT)

$(RKT): tools/rkt-stage0/build.sh tools/rkt-stage0/go.mod.in tools/rkt-stage0/go.sum.in
	@mkdir -p build/rkt
	RKT_BUILD_DIR=$(abspath build/rkt/work) ./tools/rkt-stage0/build.sh $(abspath $@)

# What the integration tests build with Go when they run (rkt's API
# client, appc's ACE validator), built ahead for the VMs of make vm-test,
# which have no Go: tests/ uses these when it finds no go.
TEST_HELPERS := build/rkt/rkt-apiclient build/ace/ace-validator
test-helpers: $(TEST_HELPERS)

# The client is built in rkt's source tree that $(RKT)'s build leaves (its
# go.mod has rkt's API and gRPC packages; nothing is fetched), without the
# build constraint that keeps it out of pod1's module.
build/rkt/rkt-apiclient: tools/rkt-apiclient/main.go $(RKT)
	@mkdir -p build/rkt/work/src/pod1-apiclient
	sed '/^\/\/go:build ignore$$/d' tools/rkt-apiclient/main.go >build/rkt/work/src/pod1-apiclient/main.go
	cd build/rkt/work/src && GO111MODULE=on GOWORK=off GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=0 \
		GOFLAGS="-modcacherw -buildvcs=false -mod=readonly" $(GO) build -o $(abspath $@) ./pod1-apiclient

# The validator and the image manifests appc/spec ships beside it.
build/ace/ace-validator: go.mod go.sum
	@mkdir -p build/ace
	CGO_ENABLED=0 $(GO) build -trimpath -o $@ github.com/appc/spec/ace
	cp $$($(GO) list -f '{{.Dir}}' github.com/appc/spec/ace)/image_manifest_*.json.in build/ace/

# make conformance runs rkt v1.30.0's own functional test suite (rkt's
# tests/, the coreos flavour) with build/stage1.aci as rkt's default stage1
# and writes docs/conformance.md. Root, 10-20 minutes; not part of make test.
CONFORMANCE_WORK ?= /var/tmp/pod1-conformance

conformance: image
	@if [ "$$(id -u)" != 0 ]; then echo "make conformance needs root: rkt's functional tests start pods"; exit 1; fi
	WORK=$(CONFORMANCE_WORK) ./tools/rkt-conformance/conformance.sh $(abspath build/stage1.aci) docs/conformance.md

# make vm-test runs the integration suite in a VM (QEMU) on Debian's stock
# kernel in a chosen cgroup layout (docs/hosts.md): LAYOUT=v2|v2root|v1|hybrid|systemd
# (default "v2 v1"), KERNEL=<package or .deb>, RUN=<go test -run regex>,
# REPO=<another checkout>. Logs in $(REPO)/build/vm/<layout>.log. Not part
# of make test: under the emulator a layout takes about half an hour.
# LAYOUT, KERNEL, RUN and VM_* reach vm/run.sh through the environment
# (make exports command-line variables), quotes and all.
REPO ?= $(CURDIR)

vm-test:
	@if [ "$$(id -u)" != 0 ]; then echo "make vm-test needs root (sudo make vm-test): the suite starts real pods"; exit 1; fi
	./vm/run.sh "$(REPO)"

# make vm-conformance runs rkt's functional suite (as make conformance
# does) in the VM of LAYOUT=systemd: built here, run there, and written
# into the systemd-vm section of docs/conformance.md (the host's section
# is kept). RUN=<extended regex> runs a subset. Results accumulate in
# build/vm/conformance, and the section reports every run there of the
# newest run's stage1, so a whole suite may run as chunks, one after
# another; remove that directory to start afresh. Root; under the
# emulator the whole suite takes hours (docs/hosts.md).
vm-conformance:
	@if [ "$$(id -u)" != 0 ]; then echo "make vm-conformance needs root: rkt's functional tests start pods"; exit 1; fi
	LAYOUT=systemd SUITE=conformance ./vm/run.sh "$(CURDIR)"; rc=$$?; \
	dirs=$$(./tools/rkt-conformance/same-stage1.sh build/vm/conformance) || exit 1; \
	if [ -n "$$dirs" ]; then \
		SECTION=systemd-vm ./tools/rkt-conformance/conformance.sh $(abspath build/stage1.aci) docs/conformance.md $$dirs || exit 1; \
	fi; \
	exit $$rc

# The linter is pinned; `make tools` installs it into $(go env GOPATH)/bin.
GOLANGCI_VERSION := v2.15.0
GOLANGCI_LINT ?= $(shell command -v golangci-lint 2>/dev/null || echo $$($(GO) env GOPATH)/bin/golangci-lint)

tools:
	$(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if [ ! -x "$(GOLANGCI_LINT)" ]; then echo "golangci-lint is not installed: make tools"; exit 1; fi
	$(GOLANGCI_LINT) run ./...

# make bench runs pod1 side by side with its peers (bench/, as root, a few
# minutes) and writes docs/benchmarks.md and docs/benchmarks.svg. It builds
# what it runs and installs the peers from Debian when they are missing;
# conmon only if the archive has it. iptables is no peer: the networking
# row's CNI plugins (masquerade) run the host's.
BENCH_PEERS := crun runc systemd-container tini catatonit
BENCH_TOOLS := iptables

bin/bench: $(SRCS)
	$(GO) build $(GOFLAGS_B) -o $@ ./bench

bench: deps all image bin/bench
	@if [ "$$(id -u)" != 0 ]; then echo "make bench needs root (sudo make bench): it starts pods and containers"; exit 1; fi
	@missing=""; for p in $(BENCH_PEERS) $(BENCH_TOOLS) conmon; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "bench: installing$$missing"; apt-get update -qq || exit 1; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(BENCH_PEERS) $(BENCH_TOOLS) || exit 1; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends conmon || echo "bench: conmon is not in this archive; measured without it"; \
	fi
	./bin/bench -repo . -out docs/benchmarks.md -svg docs/benchmarks.svg

# make bench-ab measures what each start-latency trick buys (package
# starttricks): rounds with every trick on beside rounds with one off, in
# the same run; the same sections as make bench's, alone, written to
# build/bench-ab.md (docs/benchmarks.md stays the last full run's).
# BENCH_AB_ROUNDS raises the rounds (25 at least; the start, being
# cheap, takes eight times as many).
BENCH_AB_ROUNDS ?= 25
bench-ab: all image bin/bench
	@if [ "$$(id -u)" != 0 ]; then echo "make bench-ab needs root (sudo make bench-ab): it starts pods"; exit 1; fi
	./bin/bench -repo . -only tricks -rounds $(BENCH_AB_ROUNDS) -out build/bench-ab.md -svg ""

clean:
	rm -rf bin build
