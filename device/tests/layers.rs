//! The crate's modules form layers (docs/architecture.md): each uses only modules of
//! layers below it, so there is no dependency cycle. This test reads the `crate::` paths
//! of every source file (unit tests excepted) and holds the code to that picture.

use std::path::{Path, PathBuf};

/// Top to bottom. A module may use the modules of any layer below its own.
const LAYERS: &[&[&str]] = &[
    &["main"],
    &["testkit"],
    &["server"],
    &["control", "backend", "replay"],
    &["fabric"],
    &["trace"],
    &["observer"],
    &["pci", "dmb", "fault"],
    &["ism"],
    &["dma", "interrupts"],
    &["ratelimit", "logger"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules named by `crate::` (or `ism_emu::`) paths in `code`.
fn used_modules(code: &str) -> Vec<String> {
    let mut used = Vec::new();
    for prefix in ["crate::", "ism_emu::"] {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            let names = match rest.strip_prefix('{') {
                Some(group) => group[..group.find('}').unwrap_or(group.len())]
                    .split(',')
                    .map(str::trim)
                    .collect(),
                None => vec![rest],
            };
            for name in names {
                let end = name
                    .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .unwrap_or(name.len());
                used.push(name[..end].to_string());
            }
        }
    }
    used
}

#[test]
fn every_module_uses_only_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut wrong = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_str().unwrap().trim_end_matches(".rs");
        if module == "lib" {
            continue;
        }
        let Some(own) = layer_of(module) else {
            wrong.push(format!("{module} is in no layer"));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        if text.contains("#![cfg(test)]") {
            continue; // a unit-test helper
        }
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for used in used_modules(code) {
            if used == module || layer_of(&used).is_none() {
                continue; // within the module, or an item of lib.rs
            }
            if layer_of(&used).is_some_and(|layer| layer <= own) {
                wrong.push(format!("{} uses {used}", relative.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "uses against the layers: {wrong:#?}");
}

#[test]
fn grouped_and_nested_paths_are_read() {
    let code = "use crate::{fabric::Fabric, dmb};\nlet x = crate::ism::MAX;";
    assert_eq!(used_modules(code), ["fabric", "dmb", "ism"]);
}
