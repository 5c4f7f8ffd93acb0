//! Writes the committed seed corpus (`device/fuzz/seeds/<target>/`): the Linux driver's
//! probe, DMB registration and move sequences in each target's input format. Run from
//! `device/fuzz` with `cargo run --bin gen_seeds`; the output is the same every time.

fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    for (target, seeds) in ism_emu_fuzz::seeds::all() {
        let target_dir = dir.join(target);
        let _ = std::fs::remove_dir_all(&target_dir);
        std::fs::create_dir_all(&target_dir).expect("seed directory");
        for (name, bytes) in seeds {
            std::fs::write(target_dir.join(name), bytes).expect("seed file");
        }
    }
}
