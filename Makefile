# ism-emu: an SMC-D ISM device emulator for QEMU s390x guests.
#
#   make demo    build what is missing, boot two guests over the emulated ISM,
#                show the host's view
#   make test    unit + integration tests, then ./check -g ci: end to end, faults, topologies, every line
#   make matrix  the two-guest suite on every kernel line (5.10, 6.1, 6.12, 7.2, 7.3), one table
#   make help    every target, one line each (the `## ` text on each target's line)
#
# Slow artefacts (QEMU, guest kernels) are cached under $(CACHE_DIR), keyed by their inputs.
# Defaults (kernel line, variant, CHID) live in scripts/config.sh; the Debian packages
# each step installs, in scripts/host-packages.

SHELL := /bin/bash
# Quiet by default: no recipe echo, no "Entering directory"; each step prints its own
# progress line. `make V=1 ...` shows the commands.
ifndef V
.SILENT:
endif
MAKEFLAGS += --no-print-directory
# The test targets run ./check (tests/, docs/testing.md); --strict: a test that cannot
# run (a kernel not built) fails the target instead of being left out.
CHECK_FLAGS ?= --strict
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ism-emu
BUILD_DIR ?= $(CURDIR)/build
export CACHE_DIR BUILD_DIR

.PHONY: all deps images images-all images-test sources qemu qemu-asan qemu-series-check qemu-smoke-asan kernel initramfs emulator demo test unit qemu-smoke qemu-sigp e2e \
	e2e-variants matrix e2e-matrix results-check readme-check fresh-check shell shell-check \
	ci-smcd-check vng-check bench bench-guests experiment timeline soak soak-short fuzz faults topologies \
	scale bug-livelock bug-lateabort bug-chid0 bug-smcdterm bug-dibslock bug-ieqnull bug-vlanlock bug-hslimit bug-latedata bug-peerdown bug-closeuaf bug-splicewait bug-readgid bug-clientarr bug-hsleak upstream hops coverage chaos lint clean \
	help install cli-check check-images
all: images emulator ## QEMU, the guest kernel + initramfs and the emulator (the default)

# Each target's `## ` text, one line per target, in the order of this file.
help: ## this list
	echo "Usage: make [TARGET...] [KERNEL=5.10|6.1|6.12|7.2|7.3] [VARIANT=stock|prezero|nozero|rxabort-fix|rxabort-kill|lateabort-fix|lateabort-fix-61|lateabort-fix-510|smcdterm-fix|ieqnull-fix|vlanlock-fix|hslimit-fix|readgid-fix|clientarr-fix|closeuaf-fix|latedata-rfc|latedata-rfc-510|loopback|debug|dibslock-bug|debug-ieqnull-fix|debug-vlanlock-fix|debug-closeuaf-fix] [GCOV=1] [V=1]"
	echo "Targets:"
	sed -nE 's/^([a-z][a-z0-9-]*):[^#]*## (.*)$$/  \1\t\2/p' $(MAKEFILE_LIST) | expand -t 18
	echo "Variables and what each target does: docs/running.md (\"Targets and variables\"); defaults: scripts/config.sh."

# Host packages for the Rust build (the image builders install their own).
deps: ## the host packages the Rust build needs
	@source scripts/lib.sh && need_packages emulator

images: qemu kernel initramfs ## QEMU and the selected line's kernel and initramfs

# QEMU and the kernel + initramfs of every line in KERNEL_LINES (scripts/config.sh), one
# line after the other (each unpacks its Debian source once into the cache and builds it
# with nice make -j2; a warm line only publishes its cached result).
images-all: qemu ## QEMU and every kernel line's kernel and initramfs
	source scripts/config.sh && for k in $$KERNEL_LINES; do \
		$(MAKE) --no-print-directory kernel initramfs KERNEL=$$k VARIANT=stock || exit 1; \
	done

# The same for the lines `make test` covers (TEST_LINES in scripts/config.sh: all but 7.2).
# Every line make test covers, its Debian source downloaded and unpacked into the cache,
# nothing built: what the kernel builds fetch (each line's own Debian release), checked
# without their compile time (CI's fresh root, which compiles the default line only).
sources: ## the Debian kernel source of every line make test covers, downloaded and unpacked (nothing built)
	source scripts/config.sh && for k in $$TEST_LINES; do \
		KERNEL_UNPACK_ONLY=1 $(MAKE) --no-print-directory kernel KERNEL=$$k VARIANT=stock || exit 1; \
	done

images-test: qemu ## QEMU and the kernel and initramfs of every line make test covers
	source scripts/config.sh && for k in $$TEST_LINES; do \
		$(MAKE) --no-print-directory kernel initramfs KERNEL=$$k VARIANT=stock || exit 1; \
	done

qemu: ## the patched QEMU (cached)
	qemu-configs/build-qemu.sh

qemu-asan: ## the patched QEMU again, with ASan and UBSan (cached apart): build/qemu-asan
	QEMU_SANITIZE=1 qemu-configs/build-qemu.sh

qemu-series-check: ## the QEMU series patch by patch: checkpatch --strict, and a -Werror build after each
	QEMU_SERIES_CHECK=1 qemu-configs/build-qemu.sh

qemu-smoke-asan: qemu-asan kernel initramfs ## the smoke test against the sanitizer build (0 reports)
	./check $(CHECK_FLAGS) qemu/003

kernel: ## the guest kernel of KERNEL/VARIANT, or KERNEL_SRC (cached)
	guest-tests/build-kernel.sh

initramfs: kernel ## the guest initramfs: /init, the modules, the test programs
	guest-tests/build-initramfs.sh

emulator: deps ## target/release/ism-emu
	source scripts/lib.sh && build_emulator

demo: images emulator ## two guests talk SMC-D over the emulated ISM; one verdict line at the end
	scripts/demo.sh

unit: deps ## cargo test, the guest programs' checks, the checkers' tests (pytest), the Python scripts' tests
	cargo test --locked
	$(MAKE) -s -C guest-tests/progs check OUT=$(BUILD_DIR)/guest-progs
	$(MAKE) -s -C guest-tests/preload check OUT=$(BUILD_DIR)/guest-preload
	bash -c 'source scripts/lib.sh && need_packages guests timeline unit'
	/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/ismcheck
	python3 tests/tools/test_experiment.py
	python3 tests/tools/test_hops.py
	python3 tests/tools/test_chaos.py
	python3 tests/tools/test_coverage.py
	python3 tests/tools/test_bench_guests.py
	python3 qemu-configs/tests/test_stb_sweep_rule.py
	/usr/bin/python3 tests/tools/test_timeline.py

lint: deps ## cargo fmt --check, clippy, and the Markdown's links (tests/ismcheck/check_links.py)
	PYTHONPATH=tests python3 -m ismcheck.check_links
	cargo fmt --all -- --check
	cargo clippy --locked --all-targets -- -D warnings

# The QEMU patch series against a logging vfio-user stub (no emulator involved).
qemu-smoke: images ## the QEMU patches against a logging stub, the series' qtest and functional test
	./check $(CHECK_FLAGS) qemu/001

# A stock TCG deadlock the series fixes (s390x-sigp-exclusive): a guest powering off while
# its other CPU changes page tables must power off, every boot.
qemu-sigp: images ## the SIGP STOP deadlock check: guests power off while another CPU flushes TLBs (8 boots)
	./check $(CHECK_FLAGS) qemu/002

# The end-to-end suite on the selected kernel line and variant.
e2e: images emulator ## the end-to-end suite: two guests, one guest to itself, a guest killed mid-stream, the socket API, SMC-Dv1, VLAN
	./check $(CHECK_FLAGS) -g e2e

# The topologies real installations have (tests/topology/topologies.sh, docs/testing.md "make
# topologies"): SMC-Dv1, VLAN, several ISM functions on two CHIDs, mixed kernel lines,
# loopback-ism beside ISM, four guests streaming at once over two multi-function emulators;
# one line per case, each held to what the kernel's code decides. TOPO_CASES: some of them.
# The mixed-line cases boot other lines too (the case's name says which), the loopback
# case 6.12 with loopback-ism (VARIANT=loopback): built first.
topologies: images emulator ## SMC-Dv1, VLAN, two CHIDs, mixed kernel lines, loopback beside ISM, four guests at once: one line per case (verdict, version, CHIDs, mode, decline)
	@for k in $$(TOPO_PRINT_LINES=1 tests/topology/topologies.sh $(TOPO_CASES)); do \
		$(MAKE) --no-print-directory kernel initramfs KERNEL=$${k%%:*} VARIANT=$${k#*:} || exit 1; \
	done
	tests/topology/topologies.sh $(TOPO_CASES)

# The negative controls: the observer must see what each kernel variant does.
e2e-variants: emulator qemu ## the negative-control kernels (prezero, nozero): the observer must tell
	for v in prezero nozero; do $(MAKE) kernel initramfs VARIANT=$$v || exit 1; done
	./check $(CHECK_FLAGS) smcd/007 smcd/008

# The kernel matrix: the two-guest topology with the sequential-connections test on every
# kernel line, checked against what each kernel version does with released DMBs; prints
# one table (tests/smcd/matrix.sh).
matrix: images-all emulator ## the two-guest suite on every kernel line, one table
	tests/smcd/matrix.sh

# The same on the lines `make test` covers (TEST_LINES: all but 7.2) but the default one
# (`e2e` runs the whole suite there).
e2e-matrix: images-test emulator ## the matrix on the lines make test covers, but the default
	tests/smcd/matrix.sh --others

# Every e2e run writes KTAP and JUnit reports to build/results; this reads them back with
# the kernel's KTAP parser and junitparser and checks they say what the runs recorded.
results-check: kernel ## the KTAP and JUnit reports read back by real parsers
	tests/host/results-check.sh

# README's own command blocks, run as written (the ones it marks as tested).
readme-check: images emulator ## README's tested command blocks, run as written
	tests/host/readme-check.sh

# CI's command: the host checks, then ./check -g ci (make check-images first builds what
# its tests need, each kernel once): the end-to-end topologies, the negative controls, the
# QEMU checks, the CHID and mixed-line topologies, the fault scenarios and the two-guest
# suite on every other line of TEST_LINES; then the results' and README's checks. With
# TEST_LINES the default line alone (CI's fresh root), the tests that boot another line
# (group lines) are left out.
test: lint unit cli-check qemu emulator ## lint, unit, cli-check, then ./check -g ci (every line of TEST_LINES), results, shell, README (CI's)
	args="-g ci"; source scripts/config.sh; [ "$$TEST_LINES" != "$$DEFAULT_KERNEL" ] || args="$$args -x lines"; \
		$(MAKE) --no-print-directory check-images CHECK_ARGS="$$args" && ./check $(CHECK_FLAGS) $$args
	$(MAKE) --no-print-directory results-check shell-check readme-check

# What a selection of tests needs built (./check --needs CHECK_ARGS: the kernels of each
# LINE:VARIANT, the sanitizer QEMU), each once, cached: what a CI job runs before
# `./check CHECK_ARGS` (ci/github-actions.yml, ci/gitlab-ci.yml).
CHECK_ARGS ?= -g ci
check-images: qemu emulator ## what ./check CHECK_ARGS (default: -g ci) needs built, each kernel once
	for n in $$(./check --needs $(CHECK_ARGS)); do \
		case "$$n" in \
			qemu-asan) $(MAKE) --no-print-directory qemu-asan || exit 1 ;; \
			*) $(MAKE) --no-print-directory kernel initramfs KERNEL=$${n%%:*} VARIANT=$${n#*:} || exit 1 ;; \
		esac; \
	done

# Every script's --help, usage errors and exit codes (tests/host/cli-check.sh): no guest boots.
cli-check: ## the scripts' command lines: --help, usage errors, exit codes
	tests/host/cli-check.sh

# README's two commands in a minimal Debian 12 root with an empty cache: proves that the
# project's own files install everything they need (CI runs it: its `make test` is CI's).
fresh-check: ## README's two commands in a minimal Debian 12 root with an empty cache
	scripts/fresh-check.sh

# A guest's shell on the console, a peer guest serving smctest echo, the observer beside
# (scripts/shell.sh). `make shell-check` drives it in a tmux terminal as a person would.
shell: images emulator ## a shell in a guest on the emulated ISM, a peer guest, the observer beside
	scripts/shell.sh

shell-check: images emulator ## drives make shell in a terminal (tmux)
	tests/host/shell-check.sh

# scripts/ci-smcd.sh (the entry point for a kernel tree's CI, docs/ci.md) on a real tree:
# a Debian line's source treated as someone's tree, built, changed by one line, rebuilt,
# tested; its KTAP and JUnit read back by real parsers.
ci-smcd-check: qemu emulator ## scripts/ci-smcd.sh on a Debian tree treated as yours, changed by one line
	tests/host/ci-smcd-check.sh

# virtme-ng (vng, from PyPI, pinned) booting an s390x kernel with the emulated ISM attached,
# running an SMC-D test in it (tests/host/vng-check.sh, docs/ci.md "virtme-ng"). Needs a QEMU
# with virtio-9p (VNG_QEMU=...): the project's has none, and the script says so (status 2).
vng-check: emulator qemu ## virtme-ng booting a kernel with the emulated ISM (needs VNG_QEMU)
	tests/host/vng-check.sh

bench: ## the device's throughput table (cargo bench; every thread on one CPU unless BENCH_CPU=free)
	cargo bench --bench throughput

# A waited ISM store's time hop by hop: QEMU's trace and the emulator's hop log, lined up
# (scripts/hops.sh, docs/performance.md "A waited store, hop by hop").
hops: images emulator ## a waited store's round trip, hop by hop (QEMU trace + the device's hop log)
	scripts/hops.sh

# Many guests on one emulator, one function each, all attached at once at the end (they
# run in turns of 64, each frozen once done), up to one VCHID's 255 (scripts/scale.sh,
# docs/performance.md): a row per N of GUESTS with wall time, the emulator's CPU and
# memory, the host's peak memory, connections and the reuse verdict.
GUESTS ?= 32
scale: images emulator ## many guests on one emulator (GUESTS="32 64 128 255"): time, memory, connections, reuse verdict
	SCALE_GUESTS="$(GUESTS)" scripts/scale.sh

# SMC-D against TCP between the same two guests: sockperf and iperf3 through smc_run, then
# smcbench; both guest shapes (BENCH_SHAPES), waited moves (docs/performance.md). The
# guests boot the benchmark's image flavour (INITRAMFS_TOOLS=stock: the stock tools), which
# the script builds.
bench-guests: images emulator ## SMC-D against TCP between the same two guests (sockperf, iperf3, smcbench)
	scripts/bench-guests.sh

# The seed commit's experiment (net/smc 1c5526968e27) on the emulated device: buffer and
# connection set-up latency with the zeroing at release against at hand-out, the host's
# view of the DMBs, SMC-D against TCP (docs/experiment.md). Builds the kernels it compares.
experiment: images emulator ## the seed commit's experiment: zeroing at release against at hand-out
	scripts/experiment.sh

# Fault injection against the unmodified guest stack (tests/fault/faults.sh, docs/faults.md):
# each scenario's outcome asserted from both guests and the event stream.
faults: images emulator ## fault scenarios against the unmodified kernels of two guests
	./check $(CHECK_FLAGS) -g fault -x bug

# A seeded fault campaign (tests/chaos/chaos.py, docs/chaos.md): CHAOS_ROUNDS rounds, each a
# fault schedule and a workload drawn from its seed (from CHAOS_SEED, printed), run on two
# guests and judged by four invariants (data, kernel reports, blocked calls, the host's
# reuse verdict); a failed round is replayed, shrunk and kept in build/chaos/findings/.
# VARIANT=debug by default (the kernel's bug detectors). CHAOS_ROUND=R: that one round
# seed; CHAOS_PLAN=FILE: a finding's plan.json; CHAOS_FIRST=N: start at round N (a
# campaign split over several runs: the rounds of one seed are the same whoever runs them).
CHAOS_ROUNDS ?= 5
chaos: export VARIANT ?= debug
chaos: images emulator ## a seeded fault campaign on two guests: CHAOS_ROUNDS, CHAOS_SEED (docs/chaos.md)
	tests/chaos/chaos.py --rounds $(CHAOS_ROUNDS) $(if $(CHAOS_SEED),--seed $(CHAOS_SEED)) $(if $(CHAOS_FIRST),--first $(CHAOS_FIRST)) \
		$(if $(CHAOS_ROUND),--round-seed $(CHAOS_ROUND)) $(if $(CHAOS_PLAN),--plan $(CHAOS_PLAN))

# The guest kernel's coverage of net/smc, the ism driver and dibs (scripts/coverage.sh,
# docs/coverage.md): the default line's suites on GCOV=1 kernels, beside the loopback-ism
# anchor; one table, build/coverage/summary.json and an HTML report. COVERAGE_SHORT=1: CI's
# short form (one topology, no anchor).
coverage: qemu emulator ## the guest kernel's coverage of SMC-D, emulated ISM against loopback-ism
	scripts/coverage.sh $(if $(filter 1,$(COVERAGE_SHORT)),--short)

# $(call bug_check,LINES,
# after building what they need there (make check-images: the kernels their requires()
# name, cached). Every line runs even if one fails; the status is 1 if a test failed on any.
define bug_check
	for k in $(1); do $(MAKE) --no-print-directory check-images KERNEL=$$k CHECK_ARGS="$(2)" || exit 1; done
	rc=0; for k in $(1); do KERNEL=$$k ./check $(CHECK_FLAGS) $(2) || rc=1; done; exit $$rc
endef

# The known net/smc receive livelock (tests/bug/001-002, guest-tests/kernel/patches/
# rxabort-fix/README.md), made deterministic with the fault tools: on each line of
# BUG_LINES (default 6.12) the stock kernel must wedge (detected within 20 s, reported as
# the known bug) and VARIANT=rxabort-fix must end the read with an error. One line per
# run; BUG_RUNS runs per kernel (default 1); KTAP/JUnit in build/results/bug-livelock.*.
BUG_LINES ?= 6.12
bug-livelock: qemu emulator ## the net/smc rx livelock: stock wedges (the known bug), rxabort-fix ends the read
	$(call bug_check,$(BUG_LINES),bug/001 bug/002)

# An aborted SMC-D connection's last CDC message in a reused DMB (docs/known-bugs.md,
# section 3; guest-tests/kernel/patches/lateabort-fix): make faults' late-write,
# late-data and move-reject scenarios on each line of LATEABORT_LINES (6.12 and 7.3: the
# patch applies to both), stock (the bug shows: late-write's new connection reads bytes
# never sent, the host's verdict CROSSED, explained; late-data's sender moves data into
# the released DMB) and with VARIANT=lateabort-fix (refused by the device: every verdict
# CLEAN or no reuse).
LATEABORT_LINES ?= 6.12 7.3
bug-lateabort: qemu emulator ## an aborted connection's last CDC in a reused DMB: stock crosses it, lateabort-fix refuses it
	$(call bug_check,$(LATEABORT_LINES),fault/003 fault/010 fault/002 fault/008 fault/011 fault/009)

# The known net/smc CHID-0 accept bug (upstream 277740023def; docs/known-bugs.md), with a
# crafted peer (5.10 VARIANT=chid0-peer answers SMC-Dv2 with CHID 0): the client on stock
# 5.10 (no backport) must oops in smc_conn_create(); 5.10 VARIANT=chid0-fix (the upstream
# fix) and the stock CHID0_LINES (default 6.1, which has Debian's backport) must refuse the
# accept and live. KTAP/JUnit in build/results/bug-chid0.*; BUG_RUNS runs per kernel (1).
CHID0_LINES ?= 6.1
bug-chid0: qemu emulator ## net/smc CHID-0 accept: stock 5.10 oopses (the known bug), fixed kernels refuse it
	$(call bug_check,5.10,bug/010 bug/011)
	$(call bug_check,$(CHID0_LINES),bug/012)

# A peer's shutdown ending every link group of an ISM function (docs/known-bugs.md,
# section 5; tests/bug/003-004, guest-tests/kernel/patches/smcdterm-fix): three
# guests on one emulator, a streams to b, c connects to a and powers off mid-stream. On
# each line of SMCDTERM_LINES (default 6.12; the patch applies to 7.3 too) the stock
# kernel must abort a's stream (the known bug) and VARIANT=smcdterm-fix must complete it.
# One line per run; BUG_RUNS runs per kernel (default 1); KTAP/JUnit in
# build/results/bug-smcdterm.*.
SMCDTERM_LINES ?= 6.12
bug-smcdterm: qemu emulator ## a peer's shutdown ends every link group of an ISM function: stock aborts a third guest's stream, smcdterm-fix keeps it
	$(call bug_check,$(SMCDTERM_LINES),bug/003 bug/004)

# The dibs lock bug (CVE-2026-74617, docs/known-bugs.md section 1), fixed in every line
# Debian offers: 7.3 VARIANT=dibslock-bug reverts the fix (test only) on VARIANT=debug's
# config; the device queues an event as guest b's REG_IEQ succeeds (fault reg-ieq-event).
# dibslock-bug must report the uninitialised lock, debug (fixed, same detectors) nothing.
# Not in make test or CI: the debug kernels take about 25 min each to build cold.
DIBSLOCK_LINES ?= 7.3
bug-dibslock: qemu emulator ## dibs lock: an event at REG_IEQ; 7.x with the fix reverted reports the bug, fixed debug kernels nothing
	$(call bug_check,$(DIBSLOCK_LINES),bug/017 bug/018)

# The ism driver's event queue published after its registration (docs/known-bugs.md,
# section 7; tests/bug/013-014, guest-tests/kernel/patches/ieqnull-fix): the device
# queues an event as guest b's REG_IEQ succeeds (fault reg-ieq-event), b boots up to 6
# times. On each line of IEQNULL_LINES the debug kernel (stock source) must hang in the
# event handler, VARIANT=debug-ieqnull-fix (the same config, the fix) must probe every
# time and pass an SMC-D echo. The debug config, because QEMU delivers the interrupt in
# the driver's window in about half of its boots and about 1 in 20 of a stock kernel's.
# Not in make test or CI (the debug kernels' cold builds).
IEQNULL_LINES ?= 7.3
bug-ieqnull: qemu emulator ## an event interrupt before the ism driver publishes its event queue: the probe hangs without the fix (debug kernels)
	$(call bug_check,$(IEQNULL_LINES),bug/013 bug/014)

# net/smc's VLAN refcount issues an ISM command under smcd->lock, which the interrupt
# handler takes (docs/known-bugs.md, section 11; tests/bug/015-016,
# guest-tests/kernel/patches/vlanlock-fix): the e2e vlan topology on each line of
# VLANLOCK_LINES, lockdep's report on VARIANT=debug, none on VARIANT=debug-vlanlock-fix.
# Not in make test or CI (the debug kernels' cold builds).
VLANLOCK_LINES ?= 6.12
bug-vlanlock: qemu emulator ## the VLAN refcount's ISM command under smcd->lock: lockdep's irq lock inversion without the fix (debug kernels)
	$(call bug_check,$(VLANLOCK_LINES),bug/015 bug/016)

# net.smc.limit_smc_hs on big-endian (docs/known-bugs.md section 4; tests/bug/005-006,
# guest-tests/kernel/patches/hslimit-fix): one guest, smcapi's hs-sysctl subtest. On each
# line of HSLIMIT_LINES (default 6.12; the patch applies to 7.3 too) the stock kernel
# must show the bug (the sysctl's 1 does not reach new sockets) and VARIANT=hslimit-fix
# must pass. KTAP/JUnit in build/results/bug-hslimit.*.
HSLIMIT_LINES ?= 6.12
bug-hslimit: qemu emulator ## net.smc.limit_smc_hs on big-endian: stock's sysctl never reaches new sockets, hslimit-fix's does
	$(call bug_check,$(HSLIMIT_LINES),bug/005 bug/006)

# A recv() behind an unread splice (docs/known-bugs.md section 13; tests/bug/021-022,
# guest-tests/kernel/patches/splicewait-fix): one guest, smcapi's splice-pending subtest.
# On each line of SPLICEWAIT_LINES (default 6.12; the patch applies to 6.1 and 7.3 too)
# stock must show the bug (the non-blocking read spins, SIGKILL does not end it) and
# VARIANT=splicewait-fix must pass. KTAP/JUnit in build/results/bug-splicewait.*.
SPLICEWAIT_LINES ?= 6.12
bug-splicewait: qemu emulator ## recv behind an unread splice: stock spins and ignores SIGKILL, splicewait-fix returns
	$(call bug_check,$(SPLICEWAIT_LINES),bug/021 bug/022)

# A probe whose READ_GID failed reports success (docs/known-bugs.md section 15; tests/bug/
# 023-024, guest-tests/kernel/patches/readgid-fix): the host fails b's first READ_GID. On
# each line of READGID_LINES (default 6.12) stock must leave the driver bound with no
# device and oops in ism_remove() when it is unbound; VARIANT=readgid-fix must fail that
# probe, bind again and connect over SMC-D. KTAP/JUnit in build/results/bug-readgid.*.
READGID_LINES ?= 6.12
bug-readgid: qemu emulator ## a probe whose READ_GID failed: stock stays bound and oopses on unbind, readgid-fix fails it
	$(call bug_check,$(READGID_LINES),bug/023 bug/024)

# A connect that completes as its socket closes leaves the server's socket waiting for a
# close that never comes (docs/known-bugs.md section 17; tests/bug/027-028,
# guest-tests/kernel/patches/hsleak-fix): batches of smcapi hsabort until one leaves
# net/smc referenced, then the wait for those references to go. On each line of
# HSLEAK_LINES (default 6.12 and 7.3) stock must show it and VARIANT=hsleak-fix must not.
HSLEAK_LINES ?= 6.12 7.3
bug-hsleak: qemu emulator ## a connect that completes as it closes: stock holds the server's sock for minutes, hsleak-fix tells it
	$(call bug_check,$(HSLEAK_LINES),bug/027 bug/028)

# A probe whose client array allocation failed reports success (docs/known-bugs.md
# section 16; tests/bug/025-026, guest-tests/kernel/patches/clientarr-fix): the ism
# driver loaded with each allocation of its probe failed in turn (the kernel's fault
# injection: both kernels are GCOV=1 builds, which have it). On 6.12 stock must report
# success for a failed probe and oops when the driver is unloaded; VARIANT=clientarr-fix
# must fail every such probe and connect over SMC-D after.
bug-clientarr: qemu emulator ## a probe whose allocation failed: stock stays bound and oopses on unload, clientarr-fix fails it
	$(MAKE) --no-print-directory kernel initramfs KERNEL=6.12 VARIANT=stock GCOV=1
	$(MAKE) --no-print-directory kernel initramfs KERNEL=6.12 VARIANT=clientarr-fix GCOV=1
	KERNEL=6.12 ./check $(CHECK_FLAGS) bug/025 bug/026

# Data left unsent at close written after the close (docs/known-bugs.md section 9;
# tests/bug/007-008, guest-tests/kernel/patches/latedata-rfc): a slow reader, no
# fault. On each line of LATEDATA_LINES (default 6.12) stock must truncate the stream
# silently, with b's rest written into a's released DMB, and VARIANT=latedata-rfc must
# tell the loss (a reset) and write nothing after the close. KTAP/JUnit in
# build/results/bug-latedata.*.
LATEDATA_LINES ?= 6.12
bug-latedata: qemu emulator ## a slow reader: stock truncates silently and writes after the close, latedata-rfc resets
	$(call bug_check,$(LATEDATA_LINES),bug/007 bug/008)

# The use-after-free in smc_close_stream_wait() (docs/known-bugs.md section 10;
# tests/bug/019-020, guest-tests/kernel/patches/closeuaf-fix): b closes with data unsent,
# a aborts and powers off; a test-only patch holds b's woken closer off its socket until it is killed.
# On each line of CLOSEUAF_LINES (default 6.12) VARIANT=debug-closeuaf-window must give
# KASAN's report, VARIANT=debug-closeuaf-window-fix (the same with the fix) none. Not in
# make test or CI (the debug kernels' cold builds).
CLOSEUAF_LINES ?= 6.12
bug-closeuaf: qemu emulator ## close waits with data unsent, the peer aborts and powers off: KASAN use-after-free without closeuaf-fix (debug kernels)
	$(call bug_check,$(CLOSEUAF_LINES),bug/019 bug/020)

# Data already received, discarded when the peer system goes down (docs/known-bugs.md
# section 12; tests/bug/009): b sends 32 KiB, closes and powers off, a reads 3 s
# later and gets end of file. No fix is written: every line of PEERDOWN_LINES (default
# 6.12 7.3) must show the bug. Not in CI. KTAP/JUnit in build/results/bug-peerdown.*.
PEERDOWN_LINES ?= 6.12 7.3
bug-peerdown: qemu emulator ## a peer that sends, closes and powers off: the reader loses the data already in its DMB (end of file)
	$(call bug_check,$(PEERDOWN_LINES),bug/009)

# Every kernel fix as it would be mailed (scripts/upstream.sh, docs/known-bugs.md "Sending
# the fixes"): build/upstream/<fix>/ with the patch in git format-patch form against the
# newest line (7.3.4), checked: applies to each line with the code, checkpatch --strict
# clean, Fixes: tags checked (guest-tests/kernel/patches/fixes-checked.txt), the BUG ->
# FIXED counts of the last make bug-* runs. One table; no guest boots.
upstream: ## every kernel fix as it would be mailed: format-patch, applies, checkpatch, Fixes:, BUG -> FIXED
	scripts/upstream.sh

# An event file's DMB lifecycles as a trace-event timeline for Perfetto's UI or
# chrome://tracing, and a picture of it (docs/observer.md, "Timeline"). TIMELINE_EVENTS:
# a `serve --events` file, by default the last `make demo`'s.
TIMELINE_EVENTS ?= $(BUILD_DIR)/demo/events.jsonl
timeline: emulator ## the last demo's DMB lifecycles as a Perfetto timeline and a picture
	bash -c 'source scripts/lib.sh && need_packages timeline'
	target/release/ism-emu observe timeline --from "$(TIMELINE_EVENTS)" --out "$(BUILD_DIR)/timeline.json"
	/usr/bin/python3 scripts/timeline.py "$(BUILD_DIR)/timeline.json" \
		--out "$(BUILD_DIR)/timeline.png" --out "$(BUILD_DIR)/timeline.svg"

# Soak with real guests (tests/device/soak.sh, docs/soak.md): a guest killed and booted again
# SOAK_ROUNDS times beside a streaming pair, SOAK_GUESTS guests streaming at once, the
# emulator killed under load. Not part of `make test`: the full run takes 15-25 minutes
# on two cores; `soak-short` is CI's version, about 3 minutes.
SOAK_ROUNDS ?= 100
soak: images emulator ## guests killed and booted again, eight guests, the emulator killed (15-25 min)
	SOAK_ROUNDS=$(SOAK_ROUNDS) SOAK_GUESTS=8 tests/device/soak.sh

soak-short: images emulator ## the soak, short (CI's, about 3 min: ./check device/002)
	./check $(CHECK_FLAGS) device/002

# Coverage-guided fuzzing (device/fuzz, nightly + cargo-fuzz): every target for FUZZ_SECS
# seconds (default 60), FUZZ_TARGETS to choose; one line per target (docs/fuzzing.md).
# Not part of `test`; CI runs every target for 20 s (.ci/run).
fuzz: ## every cargo-fuzz target for FUZZ_SECS (nightly toolchain)
	scripts/fuzz.sh

# The emulator with its shell completions (bash, zsh, fish) and its man pages (one per
# command: ism-emu.1, ism-emu-serve.1, ...), generated from its own command-line
# definition (`ism-emu completions SHELL`, `ism-emu man --dir DIR`), under
# $(DESTDIR)$(PREFIX).
PREFIX ?= /usr/local
install: emulator ## ism-emu, its bash/zsh/fish completions and man pages under PREFIX (/usr/local)
	rm -rf "$(BUILD_DIR)/install" && mkdir -p "$(BUILD_DIR)/install/man1"
	target/release/ism-emu completions bash >"$(BUILD_DIR)/install/ism-emu.bash"
	target/release/ism-emu completions zsh >"$(BUILD_DIR)/install/_ism-emu"
	target/release/ism-emu completions fish >"$(BUILD_DIR)/install/ism-emu.fish"
	target/release/ism-emu man --dir "$(BUILD_DIR)/install/man1"
	install -D -m 755 target/release/ism-emu "$(DESTDIR)$(PREFIX)/bin/ism-emu"
	install -D -m 644 "$(BUILD_DIR)/install/ism-emu.bash" "$(DESTDIR)$(PREFIX)/share/bash-completion/completions/ism-emu"
	install -D -m 644 "$(BUILD_DIR)/install/_ism-emu" "$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_ism-emu"
	install -D -m 644 "$(BUILD_DIR)/install/ism-emu.fish" "$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/ism-emu.fish"
	install -d "$(DESTDIR)$(PREFIX)/share/man/man1"
	install -m 644 "$(BUILD_DIR)"/install/man1/*.1 "$(DESTDIR)$(PREFIX)/share/man/man1/"
	echo "installed under $(DESTDIR)$(PREFIX): bin/ism-emu, its completions (bash, zsh, fish), its man pages (man ism-emu)"

clean: ## remove build/ and target/ (the cache stays)
	rm -rf $(BUILD_DIR) target
