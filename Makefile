# ism-emu: an SMC-D ISM device emulator for QEMU s390x guests.
#
#   make demo    boot two guests over the emulated ISM and show the host's view
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

.PHONY: all images qemu kernel initramfs emulator demo test unit e2e clean
all: images emulator

images: qemu kernel initramfs

qemu:
	qemu-configs/build-qemu.sh

kernel:
	guest-tests/build-kernel.sh

initramfs: kernel
	guest-tests/build-initramfs.sh

clean:
	rm -rf $(BUILD_DIR) target
