//! The crate's modules form layers (docs/architecture.md): each uses only modules of
//! layers below it, so there is no dependency cycle. This test reads the `crate::` paths
//! of every source file (unit tests excepted) and holds the code to that picture.

use std::path::{Path, PathBuf};

/// Top to bottom. A module may use the modules of any layer below its own.
const LAYERS: &[&[&str]] = &[
    &["main", "cli"],
    &["export"],
    &["testkit"],
    &["server"],
    &["control", "backend", "record"],
    &["observer"],
    &["fabric"],
    &["pci", "dmb", "fault"],
    &["ism"],
    &["guest"],
    &["util", "logger", "transport"],
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

/// The items of a `{..}` group up to its closing brace, split at the commas of its own
/// level: `fabric::{Fabric, Moves}, server` gives `fabric::{..}` and `server`, so a
/// nested group neither ends the group early nor hides the items after it.
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(group[start..i].trim());
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(group[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(group[start..].trim());
    items
}

/// `text` without its test-only items: each `#[cfg(test)]` and the item it guards (up to
/// its `;`, or through its matching `}`), so that code after a unit-test module is
/// still read.
fn without_test_items(text: &str) -> String {
    let mut kept = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..at]);
        let item = &rest[at..];
        let end = match (item.find(';'), item.find('{')) {
            (Some(semi), Some(open)) if semi < open => semi + 1,
            (_, Some(open)) => {
                let mut depth = 0usize;
                let mut close = item.len();
                for (i, c) in item[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                close = open + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                close
            }
            (Some(semi), None) => semi + 1,
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    kept.push_str(rest);
    kept
}

/// The top-level modules named by `crate::` (or `ism_emu::`) paths in `code`.
fn used_modules(code: &str) -> Vec<String> {
    let mut used = Vec::new();
    for prefix in ["crate::", "ism_emu::"] {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            let names = match rest.strip_prefix('{') {
                Some(group) => top_level_items(group),
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
        let code = without_test_items(&text);
        for used in used_modules(&code) {
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

#[test]
fn an_upward_use_in_a_nested_group_or_after_a_test_module_is_seen() {
    // Both were missed by the first reader: it stopped at the first `}` of a group and
    // at the first `#[cfg(test)]`.
    let code = "use crate::{fabric::{Fabric, Moves}, server::Device};";
    assert_eq!(used_modules(code), ["fabric", "server"]);
    let code = "#[cfg(test)]\nmod tests {\n    use crate::server;\n}\nuse crate::control::X;";
    assert_eq!(used_modules(&without_test_items(code)), ["control"]);
    let code = "#[cfg(test)]\nuse crate::testkit;\nfn f() { crate::fabric::g() }";
    assert_eq!(used_modules(&without_test_items(code)), ["fabric"]);
}
