//! The shape `ctcp-proto` keeps (design §7, owned parts): `Connection` is a composition of
//! a few parts rather than a bag of fields, no function grows past a screenful, and no
//! source file past a few hundred lines of non-test code. Counted from the source text;
//! run with `--nocapture` to see the figures.
//!
//! The scanner is a rough lexer, good enough for this crate: it blanks comments, string
//! and char literals, then matches braces.
#![allow(clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

/// `Connection` fields at most: a new concern is a new part, not more fields.
const MAX_CONNECTION_FIELDS: usize = 25;
/// Lines of one function at most (signature to closing brace), test code excluded.
const MAX_FN_LINES: usize = 80;
/// Non-test lines of one source file at most.
const MAX_FILE_LINES: usize = 600;

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("read src dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The source with comments and the contents of string and char literals replaced by
/// spaces (newlines kept, so line numbers hold).
fn blank(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank_range = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |n| i + n);
                blank_range(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let (mut depth, mut j) = (1, i + 2);
                while j < b.len() && depth > 0 {
                    if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                        depth += 1;
                        j += 2;
                    } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                        depth -= 1;
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                blank_range(&mut out, i, j);
                i = j;
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#'))
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let body = i + 2 + hashes;
                let close: Vec<u8> = std::iter::once(b'"')
                    .chain(std::iter::repeat_n(b'#', hashes))
                    .collect();
                let end = b[body..]
                    .windows(close.len())
                    .position(|w| w == close.as_slice())
                    .map_or(b.len(), |n| body + n);
                blank_range(&mut out, body, end);
                i = end + close.len();
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank_range(&mut out, i + 1, j.min(b.len()));
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
                if b.get(i + 1) == Some(&b'\\') {
                    let end = b[i + 2..]
                        .iter()
                        .position(|&c| c == b'\'')
                        .map_or(b.len(), |n| i + 2 + n);
                    blank_range(&mut out, i + 1, end);
                    i = end + 1;
                } else if let Some(n) = src[i + 1..].chars().next() {
                    let after = i + 1 + n.len_utf8();
                    if b.get(after) == Some(&b'\'') {
                        blank_range(&mut out, i + 1, after);
                        i = after + 1;
                    } else {
                        i += 1;
                    }
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    // Multi-byte characters inside blanked ranges became spaces byte by byte.
    String::from_utf8_lossy(&out).into_owned()
}

/// Index of the line where test code starts: the first `#[cfg(test)]` that introduces a
/// module (inline or in its own file). Everything from there on is test code.
fn test_start(lines: &[&str]) -> usize {
    for (i, l) in lines.iter().enumerate() {
        if l.trim() == "#[cfg(test)]" {
            let next = lines[i + 1..].iter().find(|l| !l.trim().starts_with("#["));
            if next.is_some_and(|n| {
                let n = n.trim();
                n.starts_with("mod ") || n.starts_with("pub(crate) mod ")
            }) {
                return i;
            }
        }
    }
    lines.len()
}

/// Files that are test modules in their own right (`#[cfg(test)] mod tests;`).
fn test_module_files(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for f in files {
        let src = fs::read_to_string(f).expect("read source");
        let lines: Vec<&str> = src.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.trim() != "#[cfg(test)]" {
                continue;
            }
            let Some(next) = lines.get(i + 1).map(|n| n.trim()) else {
                continue;
            };
            let Some(name) = next.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) else {
                continue;
            };
            let dir = if f
                .file_name()
                .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
            {
                f.parent().expect("parent").to_path_buf()
            } else {
                f.with_extension("")
            };
            out.push(dir.join(format!("{name}.rs")));
            out.push(dir.join(name).join("mod.rs"));
        }
    }
    out
}

/// (name, first line, length in lines) of every function in the non-test part.
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let line_of = |pos: usize| code[..pos].bytes().filter(|&c| c == b'\n').count() + 1;
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(n) = code[i..].find("fn ") {
        let at = i + n;
        i = at + 3;
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_') {
            continue;
        }
        let name: String = code[i..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // `fn(` pointer types
        }
        // The body opens at the first `{` outside parentheses and brackets; a `;` first
        // means a declaration without one.
        let (mut depth, mut j) = (0i32, i);
        let open = loop {
            match b.get(j) {
                None => break None,
                Some(b'(' | b'[') => depth += 1,
                Some(b')' | b']') => depth -= 1,
                Some(b';') if depth == 0 => break None,
                Some(b'{') if depth == 0 => break Some(j),
                _ => {}
            }
            j += 1;
        };
        let Some(open) = open else { continue };
        let mut braces = 0;
        let mut end = open;
        for (k, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => braces += 1,
                b'}' => {
                    braces -= 1;
                    if braces == 0 {
                        end = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let first = line_of(at);
        out.push((name, first, line_of(end) - first + 1));
    }
    out
}

/// Named fields of `pub struct Connection`.
fn connection_fields(code: &str) -> Vec<String> {
    let start = code
        .find("pub struct Connection {")
        .expect("pub struct Connection in connection/mod.rs");
    let body = &code[start + "pub struct Connection {".len()..];
    let mut depth = 0;
    let mut fields = Vec::new();
    for line in body.lines() {
        let t = line.trim();
        if depth == 0 && t.starts_with('}') {
            break;
        }
        if depth == 0 && !t.starts_with("#[") {
            let t = t.strip_prefix("pub(crate) ").unwrap_or(t);
            let t = t.strip_prefix("pub ").unwrap_or(t);
            if let Some((name, _)) = t.split_once(':') {
                if !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                    fields.push(name.to_owned());
                }
            }
        }
        depth += t.matches(['{', '(', '<']).count() as i32;
        depth -= t.matches(['}', ')', '>']).count() as i32;
        depth += t.matches("->").count() as i32; // not a closing angle bracket
    }
    fields
}

#[test]
fn proto_keeps_its_shape() {
    let dir = src_dir();
    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let test_files = test_module_files(&files);
    let mut longest: Vec<(usize, String)> = Vec::new();
    let mut sizes: Vec<(usize, String)> = Vec::new();
    let mut glob_super = Vec::new();
    for f in &files {
        let rel = f
            .strip_prefix(&dir)
            .expect("under src")
            .display()
            .to_string();
        if test_files.contains(f) {
            sizes.push((0, rel));
            continue;
        }
        let src = fs::read_to_string(f).expect("read source");
        let blanked = blank(&src);
        let lines: Vec<&str> = blanked.lines().collect();
        let cut = test_start(&lines);
        sizes.push((cut, rel.clone()));
        let code = lines[..cut].join("\n");
        if code.lines().any(|l| l.trim() == "use super::*;") {
            glob_super.push(rel.clone());
        }
        for (name, line, len) in functions(&code) {
            longest.push((len, format!("{rel}:{line} {name}")));
        }
    }
    longest.sort_by(|a, b| b.cmp(a));
    sizes.sort_by(|a, b| b.cmp(a));
    let conn = fs::read_to_string(dir.join("connection/mod.rs")).expect("connection/mod.rs");
    let fields = connection_fields(&blank(&conn));

    println!(
        "Connection fields: {} ({})",
        fields.len(),
        fields.join(", ")
    );
    println!("longest functions (lines, non-test code):");
    for (len, what) in longest.iter().take(20) {
        println!("  {len:4}  {what}");
    }
    println!("largest files (non-test lines):");
    for (n, f) in sizes.iter().take(5) {
        println!("  {n:4}  {f}");
    }
    println!("non-test `use super::*`: {glob_super:?}");

    assert!(
        fields.len() <= MAX_CONNECTION_FIELDS,
        "Connection has {} fields (at most {MAX_CONNECTION_FIELDS})",
        fields.len()
    );
    let too_long: Vec<_> = longest.iter().filter(|(n, _)| *n > MAX_FN_LINES).collect();
    assert!(
        too_long.is_empty(),
        "functions over {MAX_FN_LINES} lines: {too_long:?}"
    );
    let too_big: Vec<_> = sizes.iter().filter(|(n, _)| *n > MAX_FILE_LINES).collect();
    assert!(
        too_big.is_empty(),
        "files over {MAX_FILE_LINES} non-test lines: {too_big:?}"
    );
    assert!(
        glob_super.is_empty(),
        "`use super::*` outside tests: {glob_super:?}"
    );
}

#[test]
fn the_scanner_sees_through_comments_and_strings() {
    let src = "fn a() {\n    let s = \"}}\"; // }\n    let c = '}';\n    /* } */\n}\nfn b<'x>(v: &'x [u8; 3]) -> &'x u8 { &v[0] }\n#[cfg(test)]\nmod tests {\n    fn long() {}\n}\n";
    let blanked = blank(src);
    let fns = functions(&blanked);
    assert_eq!(
        fns,
        [
            ("a".into(), 1, 5),
            ("b".into(), 6, 1),
            ("long".into(), 9, 1)
        ]
    );
    let lines: Vec<&str> = blanked.lines().collect();
    assert_eq!(test_start(&lines), 6);
    let fields = connection_fields(
        "pub struct Connection {\n    /// Doc: x.\n    a: u8,\n    b: Option<(u8, Vec<u8>)>,\n    f: Box<dyn Fn(u8) -> u8>,\n    c: BTreeMap<u8,\n        u8>,\n}\n",
    );
    assert_eq!(fields, ["a", "b", "f", "c"]);
}
