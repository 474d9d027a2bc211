//! House rules of the workspace's sources: no module imports another that
//! imports it back, in any crate; every source folder is on the map.
//!
//! A module's imports are the paths it names outside its test modules —
//! `use` trees and paths written inline — that start at `crate`, `super`,
//! `self` or one of its own child modules; each is resolved to the longest
//! module prefix that exists. Declaring a child (`mod x;`) is not an import.
//! A cycle in that graph (found with Tarjan's strongly connected components)
//! fails the test, naming the modules and the edges between them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's crates, as its manifest lists them.
fn crates(root: &Path) -> Vec<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|line| line.trim_start().starts_with("members"))
        .expect("a members line in the workspace manifest");
    let list = line
        .split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'));
    let crates: Vec<String> = list
        .expect("members = [...] on one line")
        .0
        .split(',')
        .map(|member| member.trim().trim_matches('"').to_owned())
        .filter(|member| !member.is_empty())
        .collect();
    assert!(crates.len() >= 6, "{crates:?}");
    crates
}

type Module = Vec<String>;

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut failures = Vec::new();
    for krate in crates(&root) {
        let src = root.join(&krate).join("src");
        let modules = modules_of(&src);
        assert!(!modules.is_empty(), "no sources under {}", src.display());
        let graph = imports(&modules);
        for cycle in cycles(&graph) {
            let mut lines = vec![format!("{krate}: {}", names(&cycle))];
            for module in &cycle {
                let targets: Vec<Module> = graph[module]
                    .iter()
                    .filter(|target| cycle.contains(target))
                    .cloned()
                    .collect();
                lines.push(format!("  {} -> {}", name(module), names(&targets)));
            }
            failures.push(lines.join("\n"));
        }
    }
    assert!(
        failures.is_empty(),
        "import cycles:\n{}",
        failures.join("\n")
    );
}

/// Every source folder of the workspace's crates appears in the map of
/// `docs/architecture.md` (as `crate/src/folder/`), so that the map cannot
/// fall behind a new folder.
#[test]
fn every_source_folder_is_on_the_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let map = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mut missing = Vec::new();
    for krate in crates(&root) {
        let mut folders = vec![root.join(&krate).join("src")];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    folders.push(path);
                }
            }
            let shown = format!("`{}/`", folder.strip_prefix(&root).unwrap().display());
            if !map.contains(&shown) {
                missing.push(shown);
            }
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "docs/architecture.md does not show {}",
        missing.join(", ")
    );
}

#[test]
fn the_cycle_check_sees_a_cycle() {
    // Two files that import each other, and a child using its parent's item
    // while the parent uses the child's.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub mod p;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::B;\npub struct A;\n").unwrap();
    std::fs::write(src.join("b.rs"), "pub struct B(crate::a::A);\n").unwrap();
    std::fs::create_dir(src.join("p")).unwrap();
    std::fs::write(
        src.join("p.rs"),
        "pub mod c;\npub use c::C;\npub struct P;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("p/c.rs"),
        "pub struct C(super::P);\n#[cfg(test)]\nmod tests { use crate::a::A; }\n",
    )
    .unwrap();
    let graph = imports(&modules_of(src));
    let found: Vec<String> = cycles(&graph).iter().map(|c| names(c)).collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.contains(&"a, b".to_owned()), "{found:?}");
    assert!(found.contains(&"p, p::c".to_owned()), "{found:?}");
}

fn name(module: &Module) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

fn names(modules: &[Module]) -> String {
    let mut all: Vec<String> = modules.iter().map(name).collect();
    all.sort();
    all.join(", ")
}

/// Every module of a crate's `src` with its file (`lib.rs` is the root;
/// binaries under `src/bin` and a `main.rs` beside a `lib.rs` are left out).
fn modules_of(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path != src.join("bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            match parts.as_slice() {
                [root] if root == "lib" => {
                    out.insert(Vec::new(), path);
                }
                [root] if root == "main" => {
                    if !src.join("lib.rs").exists() {
                        out.insert(Vec::new(), path);
                    }
                }
                _ => {
                    out.insert(parts, path);
                }
            }
        }
    }
    out
}

/// The module-to-module import graph.
fn imports(modules: &BTreeMap<Module, PathBuf>) -> BTreeMap<Module, BTreeSet<Module>> {
    let known: BTreeSet<&Module> = modules.keys().collect();
    let mut graph = BTreeMap::new();
    for (module, path) in modules {
        let text = code_of(&std::fs::read_to_string(path).unwrap());
        let inline = inline_modules(&text);
        let mut targets = BTreeSet::new();
        for (at, path) in paths(&text) {
            let here: Module = module
                .iter()
                .cloned()
                .chain(
                    inline
                        .iter()
                        .filter(|(start, end, _)| *start <= at && at <= *end)
                        .map(|(_, _, name)| name.clone()),
                )
                .collect();
            let Some(full) = resolve(&path, module, &here, &known) else {
                continue;
            };
            let target = (0..=full.len())
                .rev()
                .map(|n| full[..n].to_vec())
                .find(|prefix| known.contains(prefix));
            if let Some(target) = target
                && &target != module
            {
                targets.insert(target);
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

/// The absolute path a module-relative path names, or `None` for paths
/// into other crates.
fn resolve(
    path: &[String],
    file: &Module,
    here: &Module,
    known: &BTreeSet<&Module>,
) -> Option<Module> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "super" => {
            let mut base = here.clone();
            let mut rest = path;
            while rest.first().is_some_and(|p| p == "super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            Some(base)
        }
        "self" => {
            let mut base = here.clone();
            base.extend(path[1..].iter().cloned());
            Some(base)
        }
        child => {
            let mut candidate = file.clone();
            candidate.push(child.to_owned());
            known.contains(&candidate).then(|| {
                let mut full = file.clone();
                full.extend(path.iter().cloned());
                full
            })
        }
    }
}

/// Code without test modules, comments and string contents.
fn code_of(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if let Some(after) = rest.strip_prefix("#[cfg(test)]") {
            let after = after.trim_start();
            if after.starts_with("mod ") || after.starts_with("pub(crate) mod ") {
                break;
            }
        }
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
            continue;
        }
        if rest.starts_with("/*") {
            i += rest.find("*/").map_or(rest.len(), |end| end + 2);
            continue;
        }
        if rest.starts_with("r#\"") || rest.starts_with("r\"") {
            let hashes = rest[1..].chars().take_while(|&c| c == '#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let open = 2 + hashes;
            i += rest[open..]
                .find(&close)
                .map_or(rest.len(), |end| open + end + close.len());
            out.push_str("\"\"");
            continue;
        }
        if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() {
                match rest.as_bytes()[j] {
                    b'\\' => j += 2,
                    b'"' => break,
                    _ => j += 1,
                }
            }
            i += (j + 1).min(rest.len());
            out.push_str("\"\"");
            continue;
        }
        if rest.starts_with('\'') && rest.len() > 2 {
            // A char literal ('"', '\'') must not open a string; lifetimes
            // pass through.
            let close = if rest.as_bytes()[1] == b'\\' { 3 } else { 2 };
            if rest.as_bytes().get(close) == Some(&b'\'') {
                i += close + 1;
                out.push_str("' '");
                continue;
            }
        }
        let c = rest.chars().next().unwrap();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// Inline modules (`mod name { … }`) as `(start, end, name)` byte spans.
fn inline_modules(text: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut search = 0;
    while let Some(found) = text[search..].find("mod ") {
        let at = search + found;
        search = at + 4;
        if at > 0 && text.as_bytes()[at - 1].is_ascii_alphanumeric() {
            continue;
        }
        let rest = &text[at + 4..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let after = rest[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') {
            continue;
        }
        let open = text.len() - after.len();
        let mut depth = 0;
        let mut end = text.len();
        for (offset, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + offset;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push((open, end, name));
    }
    out
}

/// Every path a module names: the leaves of its `use` trees, and paths
/// written inline (`a::b…`), with where they stand.
fn paths(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut search = 0;
    while let Some(found) = text[search..].find("use ") {
        let at = search + found;
        search = at + 4;
        if at > 0
            && (text.as_bytes()[at - 1].is_ascii_alphanumeric() || text.as_bytes()[at - 1] == b'_')
        {
            continue;
        }
        let Some(end) = text[at..].find(';') else {
            break;
        };
        for path in expand(&text[at + 4..at + end], &[]) {
            out.push((at, path));
        }
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts = (bytes[i].is_ascii_alphabetic() || bytes[i] == b'_')
            && (i == 0
                || !(bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == b'_'
                    || bytes[i - 1] == b':'));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        let mut segments = Vec::new();
        loop {
            let start = j;
            while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
                j += 1;
            }
            segments.push(text[start..j].to_owned());
            if text[j..].starts_with("::")
                && text[j + 2..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
            {
                j += 2;
            } else {
                break;
            }
        }
        if segments.len() > 1 {
            out.push((i, segments));
        }
        i = j.max(i + 1);
    }
    out
}

/// The leaves of a `use` tree under `prefix`.
fn expand(tree: &str, prefix: &[String]) -> Vec<Vec<String>> {
    let tree = tree.trim();
    if tree.is_empty() {
        return Vec::new();
    }
    if let Some(inner) = tree.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (at, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&inner[start..at]);
                    start = at + 1;
                }
                _ => {}
            }
        }
        parts.push(&inner[start..]);
        return parts.iter().flat_map(|part| expand(part, prefix)).collect();
    }
    if let Some(split) = tree.find("::{") {
        let mut next = prefix.to_vec();
        next.extend(tree[..split].split("::").map(|s| s.trim().to_owned()));
        return expand(&tree[split + 2..], &next);
    }
    let path = tree.split(" as ").next().unwrap_or(tree);
    let mut full = prefix.to_vec();
    full.extend(
        path.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "*")
            .map(str::to_owned),
    );
    vec![full]
}

/// The strongly connected components of more than one module.
fn cycles(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct Tarjan<'g> {
        graph: &'g BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'g Module, usize>,
        low: BTreeMap<&'g Module, usize>,
        stack: Vec<&'g Module>,
        on_stack: BTreeSet<&'g Module>,
        found: Vec<Vec<Module>>,
    }

    impl<'g> Tarjan<'g> {
        fn visit(&mut self, v: &'g Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.graph.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }

    let mut tarjan = Tarjan {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !tarjan.index.contains_key(v) {
            tarjan.visit(v);
        }
    }
    tarjan.found
}
