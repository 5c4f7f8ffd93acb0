# ism-emu: an SMC-D ISM device emulator for QEMU s390x guests.
#
#   make demo    build what is missing, boot two guests over the emulated ISM,
#                show the host's view
#   make test    unit + integration tests, then the end-to-end suite
#
# Slow artefacts (QEMU, guest kernels) are cached under $(CACHE_DIR), keyed by their inputs.

SHELL := /bin/bash
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/ism-emu
BUILD_DIR ?= $(CURDIR)/build
# Guest kernel line: 6.12 (Debian trixie, default) or 7.2 (Debian sid).
KERNEL ?= 6.12
# Guest kernel variant: stock (unmodified), prezero or nozero (negative controls).
VARIANT ?= stock
export CACHE_DIR BUILD_DIR KERNEL VARIANT

.PHONY: all deps images qemu kernel initramfs emulator demo test unit qemu-smoke e2e e2e-variants bench lint clean
all: images emulator

# Host packages for the Rust build (the image builders install their own).
deps:
	@source scripts/lib.sh && need_host_packages pkg-config

images: qemu kernel initramfs

qemu:
	qemu-configs/build-qemu.sh

kernel:
	guest-tests/build-kernel.sh

initramfs: kernel
	guest-tests/build-initramfs.sh

emulator:
	cargo build --release --locked

demo: images emulator
	scripts/demo.sh

unit:
	cargo test --locked

lint:
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
	$(MAKE) kernel initramfs VARIANT=prezero
	VARIANT=prezero TESTS=seq scripts/e2e.sh two
	$(MAKE) kernel initramfs VARIANT=nozero
	VARIANT=nozero TESTS=seq scripts/e2e.sh two

test: lint unit qemu-smoke e2e e2e-variants

bench:
	cargo bench --bench throughput

clean:
	rm -rf $(BUILD_DIR) target
