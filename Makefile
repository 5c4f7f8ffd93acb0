# ism-emu: an SMC-D ISM device emulator for QEMU s390x guests.
#
#   make demo    build what is missing, boot two guests over the emulated ISM,
#                show the host's view
#   make test    unit + integration tests, the end-to-end suite, the matrix on the other lines
#   make matrix  the two-guest suite on every kernel line (5.10, 6.1, 6.12, 7.2), one table
#
# Slow artefacts (QEMU, guest kernels) are cached under $(CACHE_DIR), keyed by their inputs.
# Defaults (kernel line, variant, CHID) live in scripts/config.sh; the Debian packages
# each step installs, in scripts/host-packages.

SHELL := /bin/bash
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ism-emu
BUILD_DIR ?= $(CURDIR)/build
export CACHE_DIR BUILD_DIR

.PHONY: all deps images images-all qemu kernel initramfs emulator demo test unit qemu-smoke e2e \
	e2e-variants matrix e2e-matrix results-check readme-check fresh-check shell shell-check \
	ci-smcd-check vng-check bench bench-guests experiment timeline soak soak-short fuzz faults lint clean
all: images emulator

# Host packages for the Rust build (the image builders install their own).
deps:
	@source scripts/lib.sh && need_packages emulator

images: qemu kernel initramfs

# QEMU and the kernel + initramfs of every line in KERNEL_LINES (scripts/config.sh), one
# line after the other (each unpacks its Debian source once into the cache and builds it
# with nice make -j2; a warm line only publishes its cached result).
images-all: qemu
	source scripts/config.sh && for k in $$KERNEL_LINES; do \
		$(MAKE) --no-print-directory kernel initramfs KERNEL=$$k VARIANT=stock || exit 1; \
	done

qemu:
	qemu-configs/build-qemu.sh

kernel:
	guest-tests/build-kernel.sh

initramfs: kernel
	guest-tests/build-initramfs.sh

emulator: deps
	cargo build --release --locked

demo: images emulator
	scripts/demo.sh

unit: deps
	cargo test --locked
	$(MAKE) -s -C guest-tests/progs check OUT=$(BUILD_DIR)/guest-progs
	bash -c 'source scripts/lib.sh && need_packages guests timeline'
	python3 scripts/test_experiment.py
	/usr/bin/python3 scripts/test_timeline.py

lint: deps
	cargo fmt --all -- --check
	cargo clippy --locked --all-targets -- -D warnings

# The QEMU patch series against a logging vfio-user stub (no emulator involved).
qemu-smoke: images
	qemu-configs/tests/pcistb-smoke.sh

# The end-to-end suite on the selected kernel line and variant.
e2e: images emulator
	scripts/e2e.sh

# The negative controls: the observer must see what each kernel variant does.
e2e-variants: emulator qemu
	for v in prezero nozero; do \
		$(MAKE) kernel initramfs VARIANT=$$v && VARIANT=$$v TESTS=seq scripts/e2e.sh two || exit 1; \
	done

# The kernel matrix: the two-guest topology with the sequential-connections test on every
# kernel line, checked against what each kernel version does with released DMBs; prints
# one table (scripts/matrix.sh).
matrix: images-all emulator
	scripts/matrix.sh

# The same on every line but the default one (`e2e` runs the whole suite there).
e2e-matrix: images-all emulator
	scripts/matrix.sh --others

# Every e2e run writes KTAP and JUnit reports to build/results; this reads them back with
# the kernel's KTAP parser and junitparser and checks they say what the runs recorded.
results-check: kernel
	scripts/results-check.sh

# README's own command blocks, run as written (the ones it marks as tested).
readme-check: images emulator
	scripts/readme-check.sh

test: lint unit qemu-smoke e2e faults e2e-variants e2e-matrix results-check shell-check readme-check

# README's two commands in a minimal Debian 12 root with an empty cache: proves that the
# project's own files install everything they need (CI runs it: its `make test` is CI's).
fresh-check:
	scripts/fresh-check.sh

# A guest's shell on the console, a peer guest serving smctest echo, the observer beside
# (scripts/shell.sh). `make shell-check` drives it in a tmux terminal as a person would.
shell: images emulator
	scripts/shell.sh

shell-check: images emulator
	scripts/shell-check.sh

# scripts/ci-smcd.sh (the entry point for a kernel tree's CI, docs/ci.md) on a real tree:
# a Debian line's source treated as someone's tree, built, changed by one line, rebuilt,
# tested; its KTAP and JUnit read back by real parsers.
ci-smcd-check: qemu emulator
	scripts/ci-smcd-check.sh

# virtme-ng (vng, from PyPI, pinned) booting an s390x kernel with the emulated ISM attached,
# running an SMC-D test in it (scripts/vng-check.sh, docs/ci.md "virtme-ng"). Needs a QEMU
# with virtio-9p (VNG_QEMU=...): the project's has none, and the script says so (status 2).
vng-check: emulator qemu
	scripts/vng-check.sh

bench:
	cargo bench --bench throughput

# SMC-D against TCP between the same two guests, waited and posted moves (docs/performance.md).
bench-guests: images emulator
	scripts/bench-guests.sh

# The seed commit's experiment (net/smc 1c5526968e27) on the emulated device: buffer and
# connection set-up latency with the zeroing at release against at hand-out, the host's
# view of the DMBs, SMC-D against TCP (docs/experiment.md). Builds the kernels it compares.
experiment: images emulator
	scripts/experiment.sh

# Fault injection against the unmodified guest stack (scripts/faults.sh, docs/faults.md):
# each scenario's outcome asserted from both guests and the event stream.
faults: images emulator
	scripts/faults.sh

# An event file's DMB lifecycles as a trace-event timeline for Perfetto's UI or
# chrome://tracing, and a picture of it (docs/observer.md, "Timeline"). TIMELINE_EVENTS:
# a `serve --events` file, by default the last `make demo`'s.
TIMELINE_EVENTS ?= $(BUILD_DIR)/demo/events.jsonl
timeline: emulator
	bash -c 'source scripts/lib.sh && need_packages timeline'
	target/release/ism-emu observe timeline --from "$(TIMELINE_EVENTS)" --out "$(BUILD_DIR)/timeline.json"
	/usr/bin/python3 scripts/timeline.py "$(BUILD_DIR)/timeline.json" \
		--out "$(BUILD_DIR)/timeline.png" --out "$(BUILD_DIR)/timeline.svg"

# Soak with real guests (scripts/soak.sh, docs/soak.md): a guest killed and booted again
# SOAK_ROUNDS times beside a streaming pair, SOAK_GUESTS guests streaming at once, the
# emulator killed under load. Not part of `make test`: the full run takes 15-25 minutes
# on two cores; `soak-short` is CI's version, about 3 minutes.
SOAK_ROUNDS ?= 100
soak: images emulator
	SOAK_ROUNDS=$(SOAK_ROUNDS) SOAK_GUESTS=8 scripts/soak.sh

soak-short: images emulator
	SOAK_ROUNDS=3 SOAK_GUESTS=8 scripts/soak.sh

# Coverage-guided fuzzing (device/fuzz, nightly + cargo-fuzz): every target for FUZZ_SECS
# seconds (default 60), FUZZ_TARGETS to choose; one line per target (docs/fuzzing.md).
# Not part of `test`; CI runs every target for 20 s (.ci/run).
fuzz:
	scripts/fuzz.sh

clean:
	rm -rf $(BUILD_DIR) target
