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
/// Lines of one function at most (signature to closing brace), test code included.
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

/// Replaces `out[from..to]` by spaces, newlines kept.
fn blank_range(out: &mut [u8], from: usize, to: usize) {
    let to = to.min(out.len());
    for c in &mut out[from..to] {
        if *c != b'\n' {
            *c = b' ';
        }
    }
}

/// End (exclusive) of the block comment opening at `i`; block comments nest.
fn block_comment_end(b: &[u8], i: usize) -> usize {
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
    j
}

/// For a raw string opening at `i` (`r"`, `r#"`…): its body's range and where it ends.
fn raw_string(b: &[u8], i: usize) -> Option<(usize, usize, usize)> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None;
    }
    let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
    if b.get(i + 1 + hashes) != Some(&b'"') {
        return None;
    }
    let body = i + 2 + hashes;
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let end = b[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())
        .map_or(b.len(), |n| body + n);
    Some((body, end, end + close.len()))
}

/// For a quote at `i`: the range of a char literal's contents ('x', '\n', '\u{..}') and
/// where it ends, or `None` for a lifetime ('a).
fn char_literal(src: &str, i: usize) -> Option<(usize, usize, usize)> {
    let b = src.as_bytes();
    if b.get(i + 1) == Some(&b'\\') {
        let end = b[i + 2..]
            .iter()
            .position(|&c| c == b'\'')
            .map_or(b.len(), |n| i + 2 + n);
        return Some((i + 1, end, end + 1));
    }
    let after = i + 1 + src[i + 1..].chars().next()?.len_utf8();
    (b.get(after) == Some(&b'\'')).then_some((i + 1, after, after + 1))
}

/// The source with comments and the contents of string and char literals replaced by
/// spaces (newlines kept, so line numbers hold).
fn blank(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        let literal = match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |n| i + n);
                Some((i, end, end))
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = block_comment_end(b, i);
                Some((i, end, end))
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#')) => raw_string(b, i),
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                Some((i + 1, j, j + 1))
            }
            b'\'' => char_literal(src, i),
            _ => None,
        };
        match literal {
            Some((from, to, next)) => {
                blank_range(&mut out, from, to);
                i = next;
            }
            None => i += 1,
        }
    }
    // Multi-byte characters inside blanked ranges became spaces byte by byte.
    String::from_utf8_lossy(&out).into_owned()
}

/// Index of the line where test code starts: the first `#[cfg(test)]` that introduces an
/// inline module. Everything from there on is test code.
fn test_start(lines: &[&str]) -> usize {
    for (i, l) in lines.iter().enumerate() {
        if l.trim() == "#[cfg(test)]" {
            let next = lines[i + 1..].iter().find(|l| !l.trim().starts_with("#["));
            // An inline module (`mod tests {`); `mod tests;` only names a file.
            if next.is_some_and(|n| {
                let n = n.trim();
                (n.starts_with("mod ") || n.starts_with("pub(crate) mod ")) && n.ends_with('{')
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

/// What the scan of the crate found: (lines, where) of every function, the non-test
/// lines of every file, and the files that glob-import their parent outside tests.
#[derive(Default)]
struct Census {
    functions: Vec<(usize, String)>,
    test_functions: Vec<(usize, String)>,
    files: Vec<(usize, String)>,
    glob_super: Vec<String>,
}

impl Census {
    /// Scans `src/` (test modules apart) and `tests/` (all test code).
    fn take() -> Self {
        let dir = src_dir();
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        let test_files = test_module_files(&files);
        let mut c = Census::default();
        for f in &files {
            let rel = f
                .strip_prefix(&dir)
                .expect("under src")
                .display()
                .to_string();
            let blanked = blank(&fs::read_to_string(f).expect("read source"));
            let lines: Vec<&str> = blanked.lines().collect();
            let cut = if test_files.contains(f) {
                0
            } else {
                test_start(&lines)
            };
            c.files.push((cut, rel.clone()));
            let code = lines[..cut].join("\n");
            if code.lines().any(|l| l.trim() == "use super::*;") {
                c.glob_super.push(rel.clone());
            }
            for (name, line, len) in functions(&code) {
                c.functions.push((len, format!("{rel}:{line} {name}")));
            }
            for (name, line, len) in functions(&lines[cut..].join("\n")) {
                let at = line + cut;
                c.test_functions.push((len, format!("{rel}:{at} {name}")));
            }
        }
        // The integration tests (this file included) are test code throughout.
        let tests_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
        let mut integration = Vec::new();
        rust_files(&tests_dir, &mut integration);
        for f in &integration {
            let rel = f.strip_prefix(&tests_dir).expect("under tests").display();
            let src = fs::read_to_string(f).expect("read test source");
            for (name, line, len) in functions(&blank(&src)) {
                c.test_functions
                    .push((len, format!("tests/{rel}:{line} {name}")));
            }
        }
        c.functions.sort_by(|a, b| b.cmp(a));
        c.test_functions.sort_by(|a, b| b.cmp(a));
        c.files.sort_by(|a, b| b.cmp(a));
        c
    }
}

fn print_top(title: &str, rows: &[(usize, String)]) {
    println!("{title}:");
    for (n, what) in rows.iter().take(5) {
        println!("  {n:4}  {what}");
    }
}

#[test]
fn proto_keeps_its_shape() {
    let c = Census::take();
    let conn = fs::read_to_string(src_dir().join("connection/mod.rs")).expect("connection/mod.rs");
    let fields = connection_fields(&blank(&conn));
    println!(
        "Connection fields: {} ({})",
        fields.len(),
        fields.join(", ")
    );
    print_top("longest functions (lines, non-test code)", &c.functions);
    print_top("longest test functions (lines)", &c.test_functions);
    print_top("largest files (non-test lines)", &c.files);
    println!("non-test `use super::*`: {:?}", c.glob_super);

    assert!(
        fields.len() <= MAX_CONNECTION_FIELDS,
        "Connection has {} fields (at most {MAX_CONNECTION_FIELDS})",
        fields.len()
    );
    let over = |rows: &[(usize, String)], limit| -> Vec<String> {
        rows.iter()
            .filter(|(n, _)| *n > limit)
            .map(|(n, w)| format!("{n} {w}"))
            .collect()
    };
    let long = over(&c.functions, MAX_FN_LINES);
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines: {long:?}"
    );
    let long = over(&c.test_functions, MAX_FN_LINES);
    assert!(
        long.is_empty(),
        "test functions over {MAX_FN_LINES} lines: {long:?}"
    );
    let big = over(&c.files, MAX_FILE_LINES);
    assert!(
        big.is_empty(),
        "files over {MAX_FILE_LINES} non-test lines: {big:?}"
    );
    assert!(
        c.glob_super.is_empty(),
        "`use super::*` outside tests: {:?}",
        c.glob_super
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
