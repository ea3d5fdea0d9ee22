//! The documentation checks: what README.md and the book under `docs/` promise must hold.
//!
//! 1. Every relative link in README.md and `docs/src/**/*.md` leads to a file that exists, and
//!    every path written as `scripts/…`, `examples/…` or `data/…` exists.
//! 2. The scenario reference (`docs/src/reference/*.md`) names exactly the keys the scenario
//!    parser accepts: no key is undocumented and no documented key is refused. The parser's keys
//!    come from walking the serde schema of `onionlab_scenario::Scenario` (every struct refuses
//!    unknown keys, so its field lists are the accepted keys); the documented keys are those of
//!    the reference's key tables (see [`documented_keys`] for the convention).
//! 3. README.md is at most 15 KiB: a front page, with the reference in the book.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}

/// README.md and every Markdown file under docs/src, relative to the repository root.
fn markdown_files() -> Vec<PathBuf> {
    let root = repo();
    let mut out = vec![PathBuf::from("README.md")];
    let mut dirs = vec![root.join("docs/src")];
    assert!(
        dirs[0].is_dir(),
        "docs/src is missing: the book lives there"
    );
    while let Some(d) = dirs.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p.strip_prefix(&root).expect("under the root").to_path_buf());
            }
        }
    }
    out
}

fn read(rel: &Path) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
}

// ------------------------------------------------------------------------------------------
// 1. Links and paths
// ------------------------------------------------------------------------------------------

/// The text with fenced code blocks and inline code spans blanked out (links inside code are
/// not links), keeping line structure so that line numbers stay right.
fn without_code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(f) = fence {
            if t.starts_with(f) {
                fence = None;
            }
            out.push('\n');
            continue;
        }
        if t.starts_with("```") || t.starts_with("~~~") {
            fence = Some(&t[..3]);
            out.push('\n');
            continue;
        }
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                out.push(' ');
            } else {
                out.push(if in_code { ' ' } else { c });
            }
        }
        out.push('\n');
    }
    out
}

/// Link targets in Markdown text (code already removed), with their line numbers: inline links
/// and images `[text](target "title")`, reference definitions `[label]: target`, and HTML
/// `href="…"` / `src="…"` attributes.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        // Reference definitions.
        let t = line.trim_start();
        if t.starts_with('[') {
            if let Some(end) = t.find("]:") {
                if !t[..end].contains("](") {
                    if let Some(target) = t[end + 2..].split_whitespace().next() {
                        out.push((line_no, target.trim_matches(['<', '>']).to_string()));
                    }
                }
            }
        }
        // Inline links and images.
        let b = line.as_bytes();
        let mut i = 0;
        while let Some(k) = line[i..].find("](") {
            let start = i + k + 2;
            let mut depth = 1;
            let mut j = start;
            while j < b.len() {
                match b[j] {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            let inner = line[start..j].trim();
            let target = if let Some(rest) = inner.strip_prefix('<') {
                rest.split('>').next().unwrap_or("")
            } else {
                inner.split_whitespace().next().unwrap_or("")
            };
            out.push((line_no, target.to_string()));
            i = j.min(b.len());
            if i >= b.len() {
                break;
            }
        }
        // HTML attributes.
        for attr in ["href=\"", "src=\""] {
            let mut rest = line;
            while let Some(k) = rest.find(attr) {
                rest = &rest[k + attr.len()..];
                if let Some(end) = rest.find('"') {
                    out.push((line_no, rest[..end].to_string()));
                }
            }
        }
    }
    out
}

fn is_external(target: &str) -> bool {
    let lower = target.to_ascii_lowercase();
    ["http://", "https://", "mailto:", "ftp://"]
        .iter()
        .any(|p| lower.starts_with(p))
}

/// Characters a repository path is written with.
fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "/._-+*~".contains(c)
}

/// Paths written as `scripts/…`, `examples/…` or `data/…` (at the start of a word, so that
/// `crates/x/data/…` or a URL does not count), with their line numbers. A trailing full stop
/// belongs to the sentence; `data:` aliases are not paths.
fn repo_paths(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for prefix in ["scripts/", "examples/", "data/"] {
            let mut from = 0;
            while let Some(k) = line[from..].find(prefix) {
                let at = from + k;
                from = at + prefix.len();
                let before = line[..at].chars().next_back();
                if before.is_some_and(|c| path_char(c) || c == ':' || c == '$' || c == '@') {
                    continue;
                }
                let token: String = line[at..].chars().take_while(|&c| path_char(c)).collect();
                let token = token.trim_end_matches('.').to_string();
                let token = if token.ends_with('/') || token.len() > prefix.len() {
                    token
                } else {
                    format!("{token}/")
                };
                out.push((n + 1, token));
            }
        }
    }
    out
}

/// Whether `pattern` (relative to `dir`) names something that exists; a segment with `*`
/// matches any name of that folder.
fn exists(dir: &Path, pattern: &str) -> bool {
    let mut parts = pattern.splitn(2, '/');
    let first = parts.next().unwrap_or("");
    let rest = parts.next().unwrap_or("");
    let here: Vec<PathBuf> = if first.is_empty() {
        vec![dir.to_path_buf()]
    } else if first.contains('*') {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| wildcard(first, &e.file_name().to_string_lossy()))
            .map(|e| e.path())
            .collect()
    } else {
        vec![dir.join(first)]
    };
    here.iter().any(|p| {
        if rest.is_empty() {
            p.exists()
        } else {
            p.is_dir() && exists(p, rest)
        }
    })
}

/// `*` matches any run of characters.
fn wildcard(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            name.starts_with(head)
                && (0..=name.len() - head.len()).any(|k| {
                    name.is_char_boundary(head.len() + k) && wildcard(tail, &name[head.len() + k..])
                })
        }
    }
}

#[test]
fn links_and_paths_exist() {
    let root = repo();
    let mut broken = Vec::new();
    let mut links = 0;
    let mut paths = 0;
    for file in markdown_files() {
        let text = read(&file);
        let dir = root.join(file.parent().unwrap_or(Path::new("")));
        for (line, target) in link_targets(&without_code(&text)) {
            if target.is_empty() || target.starts_with('#') || is_external(&target) {
                continue;
            }
            links += 1;
            let path = target.split(['#', '?']).next().unwrap_or("");
            if path.starts_with('/') || path.contains("://") {
                broken.push(format!(
                    "{}:{line}: link {target:?} leaves the repository",
                    file.display()
                ));
                continue;
            }
            let resolved = dir.join(path);
            let inside = resolved
                .canonicalize()
                .map(|p| p.starts_with(&root))
                .unwrap_or(false);
            if !resolved.exists() || !inside {
                broken.push(format!(
                    "{}:{line}: link {target:?} leads to no file ({})",
                    file.display(),
                    if inside || !resolved.exists() {
                        "missing"
                    } else {
                        "outside the repository"
                    }
                ));
            }
        }
        for (line, path) in repo_paths(&text) {
            paths += 1;
            if !exists(&root, &path) {
                broken.push(format!(
                    "{}:{line}: path `{path}` does not exist",
                    file.display()
                ));
            }
        }
    }
    assert!(
        links > 0 && paths > 0,
        "no links or paths found: the scan is broken"
    );
    assert!(
        broken.is_empty(),
        "{} broken links or paths (relative links are relative to the page; `scripts/`, \
         `examples/` and `data/` paths to the repository root):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

// ------------------------------------------------------------------------------------------
// 2. The scenario reference against the parser
// ------------------------------------------------------------------------------------------

/// A serde `Deserializer` that answers no value at all, but reports the shape of the type that
/// asks it for one: a struct's fields, an enum's variants, a list, a map or a plain value.
///
/// Each walk follows one target path (`["clients", "[]", "workload", "web"]`) down the schema,
/// feeding each struct or map one key (the next segment), each enum the variant named next and
/// each list one element, until the target is reached; there it records the shape and stops with
/// an error. [`schema`] walks every path breadth-first. Types that read themselves with
/// `deserialize_any` (a count or a map for `authorities`, `none` or a map for `cpu`, quantities
/// such as `5 MiB`) are offered a map with an unknown key: a struct refuses it with the list of
/// fields it expected, which is its shape; anything else that refuses a map is a plain value.
mod walk {
    use std::cell::RefCell;
    use std::fmt;

    use serde::de::{
        self, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess, VariantAccess,
        Visitor,
    };

    #[derive(Clone, Debug, PartialEq)]
    pub(super) enum Shape {
        Struct(Vec<String>),
        Enum(Vec<String>),
        Seq,
        Map,
        Leaf,
        /// A variant without data: a value (`kist`), not a key.
        UnitVariant,
    }

    /// The list-element segment of a path.
    pub(super) const ELEMENT: &str = "[]";
    const PROBE: &str = "\u{1}no such key";

    #[derive(Debug)]
    pub(super) struct Error {
        msg: String,
        expected: Option<Vec<String>>,
    }

    impl fmt::Display for Error {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.msg)
        }
    }

    impl std::error::Error for Error {}

    impl de::Error for Error {
        fn custom<T: fmt::Display>(msg: T) -> Self {
            Error {
                msg: msg.to_string(),
                expected: None,
            }
        }
        fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
            Error {
                msg: format!("unknown field {field:?}"),
                expected: Some(expected.iter().map(|s| s.to_string()).collect()),
            }
        }
    }

    pub(super) struct Walker<'a> {
        pub path: Vec<String>,
        pub target: &'a [String],
        pub found: &'a RefCell<Option<Shape>>,
    }

    impl<'a> Walker<'a> {
        fn at_target(&self) -> bool {
            self.path.as_slice() == self.target
        }
        fn next(&self) -> Result<&'a str, Error> {
            self.target
                .get(self.path.len())
                .map(String::as_str)
                .ok_or_else(|| de::Error::custom("walked past the target"))
        }
        fn child(&self, seg: &str) -> Walker<'a> {
            let mut path = self.path.clone();
            path.push(seg.to_string());
            Walker {
                path,
                target: self.target,
                found: self.found,
            }
        }
        /// Records the target's shape; the error ends the walk.
        fn record(&self, shape: Shape) -> Error {
            *self.found.borrow_mut() = Some(shape);
            de::Error::custom("reached the target")
        }
        fn leaf<T>(self) -> Result<T, Error> {
            if self.at_target() {
                Err(self.record(Shape::Leaf))
            } else {
                Err(de::Error::custom(format!(
                    "{:?} is a plain value, with no key {:?}",
                    self.path,
                    self.next()?
                )))
            }
        }
    }

    macro_rules! leaves {
        ($($m:ident),*) => {
            $(fn $m<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, Error> { self.leaf() })*
        };
    }

    impl<'de, 'a> de::Deserializer<'de> for Walker<'a> {
        type Error = Error;

        fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            if self.at_target() {
                let probe = Probe {
                    walker: &self,
                    asked: false,
                };
                return match v.visit_map(probe) {
                    Err(Error {
                        expected: Some(fields),
                        ..
                    }) => Err(self.record(Shape::Struct(fields))),
                    Err(e) if self.found.borrow().is_some() => Err(e),
                    _ => Err(self.record(Shape::Leaf)),
                };
            }
            let seg = self.next()?;
            if seg == ELEMENT {
                v.visit_seq(One {
                    walker: Some(self.child(ELEMENT)),
                })
            } else {
                v.visit_map(Entry {
                    key: Some(seg),
                    walker: Some(self.child(seg)),
                })
            }
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            v: V,
        ) -> Result<V::Value, Error> {
            if self.at_target() {
                return Err(self.record(Shape::Struct(
                    fields.iter().map(|f| f.to_string()).collect(),
                )));
            }
            let seg = self.next()?;
            v.visit_map(Entry {
                key: Some(seg),
                walker: Some(self.child(seg)),
            })
        }

        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _name: &'static str,
            variants: &'static [&'static str],
            v: V,
        ) -> Result<V::Value, Error> {
            if self.at_target() {
                return Err(self.record(Shape::Enum(
                    variants.iter().map(|f| f.to_string()).collect(),
                )));
            }
            let seg = self.next()?;
            v.visit_enum(Variant {
                name: seg,
                walker: self.child(seg),
            })
        }

        fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            if self.at_target() {
                return Err(self.record(Shape::Seq));
            }
            if self.next()? != ELEMENT {
                return Err(de::Error::custom("a list has only elements"));
            }
            v.visit_seq(One {
                walker: Some(self.child(ELEMENT)),
            })
        }

        fn deserialize_map<V: Visitor<'de>>(self, _v: V) -> Result<V::Value, Error> {
            if self.at_target() {
                return Err(self.record(Shape::Map));
            }
            Err(de::Error::custom("the walk does not enter maps"))
        }

        fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Error> {
            v.visit_some(self)
        }

        fn deserialize_newtype_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            v: V,
        ) -> Result<V::Value, Error> {
            v.visit_newtype_struct(self)
        }

        fn deserialize_unit_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            _v: V,
        ) -> Result<V::Value, Error> {
            self.leaf()
        }

        fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, _v: V) -> Result<V::Value, Error> {
            self.leaf()
        }

        fn deserialize_tuple_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            _len: usize,
            _v: V,
        ) -> Result<V::Value, Error> {
            self.leaf()
        }

        leaves!(
            deserialize_bool,
            deserialize_i8,
            deserialize_i16,
            deserialize_i32,
            deserialize_i64,
            deserialize_i128,
            deserialize_u8,
            deserialize_u16,
            deserialize_u32,
            deserialize_u64,
            deserialize_u128,
            deserialize_f32,
            deserialize_f64,
            deserialize_char,
            deserialize_str,
            deserialize_string,
            deserialize_bytes,
            deserialize_byte_buf,
            deserialize_unit,
            deserialize_identifier,
            deserialize_ignored_any
        );
    }

    /// A map of one unknown key, offered to a type that reads itself with `deserialize_any`.
    struct Probe<'w, 'a> {
        walker: &'w Walker<'a>,
        asked: bool,
    }

    impl<'de> MapAccess<'de> for Probe<'_, '_> {
        type Error = Error;
        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            k: K,
        ) -> Result<Option<K::Value>, Error> {
            if self.asked {
                return Ok(None);
            }
            self.asked = true;
            k.deserialize(IntoDeserializer::<Error>::into_deserializer(PROBE))
                .map(Some)
        }
        fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, _s: S) -> Result<S::Value, Error> {
            // Any key is taken: a map of free keys.
            Err(self.walker.record(Shape::Map))
        }
    }

    /// A map of the one entry the walk goes into.
    struct Entry<'a> {
        key: Option<&'a str>,
        walker: Option<Walker<'a>>,
    }

    impl<'de, 'a> MapAccess<'de> for Entry<'a> {
        type Error = Error;
        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            k: K,
        ) -> Result<Option<K::Value>, Error> {
            match self.key.take() {
                Some(key) => k.deserialize(key.into_deserializer()).map(Some),
                None => Ok(None),
            }
        }
        fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, s: S) -> Result<S::Value, Error> {
            s.deserialize(self.walker.take().expect("one value per key"))
        }
    }

    /// A list of the one element the walk goes into.
    struct One<'a> {
        walker: Option<Walker<'a>>,
    }

    impl<'de, 'a> SeqAccess<'de> for One<'a> {
        type Error = Error;
        fn next_element_seed<T: DeserializeSeed<'de>>(
            &mut self,
            t: T,
        ) -> Result<Option<T::Value>, Error> {
            match self.walker.take() {
                Some(w) => t.deserialize(w).map(Some),
                None => Ok(None),
            }
        }
    }

    /// The variant the walk goes into.
    struct Variant<'a> {
        name: &'a str,
        walker: Walker<'a>,
    }

    impl<'de, 'a> EnumAccess<'de> for Variant<'a> {
        type Error = Error;
        type Variant = Walker<'a>;
        fn variant_seed<T: DeserializeSeed<'de>>(
            self,
            t: T,
        ) -> Result<(T::Value, Walker<'a>), Error> {
            let v = t.deserialize(self.name.into_deserializer())?;
            Ok((v, self.walker))
        }
    }

    impl<'de> VariantAccess<'de> for Walker<'_> {
        type Error = Error;
        fn unit_variant(self) -> Result<(), Error> {
            if self.at_target() {
                Err(self.record(Shape::UnitVariant))
            } else {
                Err(de::Error::custom("a unit variant has no keys"))
            }
        }
        fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, t: T) -> Result<T::Value, Error> {
            t.deserialize(self)
        }
        fn tuple_variant<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, Error> {
            de::Deserializer::deserialize_tuple(self, len, v)
        }
        fn struct_variant<V: Visitor<'de>>(
            self,
            fields: &'static [&'static str],
            v: V,
        ) -> Result<V::Value, Error> {
            de::Deserializer::deserialize_struct(self, "", fields, v)
        }
    }
}

/// Every path of `T`'s schema with its shape, the root (`[]`) included.
fn schema<T: serde::de::DeserializeOwned>() -> BTreeMap<Vec<String>, walk::Shape> {
    use walk::Shape;
    let mut out = BTreeMap::new();
    let mut todo: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(target) = todo.pop() {
        assert!(
            target.len() < 16,
            "the schema walk went too deep at {target:?}"
        );
        let found = std::cell::RefCell::new(None);
        let result = T::deserialize(walk::Walker {
            path: Vec::new(),
            target: &target,
            found: &found,
        });
        let shape = found.into_inner().unwrap_or_else(|| {
            panic!(
                "the schema walk did not reach {target:?}: {:?}",
                result.err()
            )
        });
        let mut child = |seg: &str| {
            let mut p = target.clone();
            p.push(seg.to_string());
            todo.push(p);
        };
        match &shape {
            Shape::Struct(fields) => fields.iter().for_each(|f| child(f)),
            Shape::Enum(variants) => variants.iter().for_each(|v| child(v)),
            Shape::Seq => child(walk::ELEMENT),
            Shape::Map | Shape::Leaf | Shape::UnitVariant => {}
        }
        out.insert(target, shape);
    }
    out
}

/// A path as the reference writes it: `clients[].workload.web.size`.
fn dotted(path: &[String]) -> String {
    let mut s = String::new();
    for seg in path {
        if seg != walk::ELEMENT && !s.is_empty() {
            s.push('.');
        }
        s.push_str(seg);
    }
    s
}

/// The keys a scenario may contain, as dotted paths, each with the values it takes when it
/// takes one of a fixed set of words (`tor.scheduler`: `kist`, `kist_lite`, `vanilla`).
///
/// A key is every struct field and every variant that carries data (`relays.generate`,
/// `clients[].workload.web`); variants without data are values, not keys. Keys inside a list
/// are written after `[]` (`clients[].name`). `cpu.costs` is one map: its keys are the
/// unit costs' names, which validation (not serde) checks, so they come from
/// `UnitCosts::named`. `processes[].env` is the other, and its keys are the user's own
/// variable names.
fn parser_keys() -> BTreeMap<String, Vec<String>> {
    use walk::Shape;
    let tree = schema::<onionlab_scenario::Scenario>();
    let words = |path: &Vec<String>| -> Vec<String> {
        let enum_path = match tree.get(path) {
            Some(Shape::Seq) => {
                let mut p = path.clone();
                p.push(walk::ELEMENT.into());
                p
            }
            _ => path.clone(),
        };
        match tree.get(&enum_path) {
            Some(Shape::Enum(variants))
                if variants.iter().all(|v| {
                    let mut p = enum_path.clone();
                    p.push(v.clone());
                    tree.get(&p) == Some(&Shape::UnitVariant)
                }) =>
            {
                variants.clone()
            }
            _ => Vec::new(),
        }
    };
    let mut keys = BTreeMap::new();
    for (path, shape) in &tree {
        let Some(last) = path.last() else { continue };
        if last == walk::ELEMENT || *shape == Shape::UnitVariant {
            continue;
        }
        if *shape == Shape::Map && dotted(path) != "processes[].env" {
            assert_eq!(
                dotted(path),
                "cpu.costs",
                "a new map in the scenario schema: say in this test where its keys come from"
            );
            for (name, _) in onionlab_torcore::cpu::UnitCosts::default().named() {
                keys.insert(format!("cpu.costs.{name}"), Vec::new());
            }
        }
        keys.insert(dotted(path), words(path));
    }
    keys
}

/// The pages of the scenario reference.
fn reference_pages() -> Vec<PathBuf> {
    let dir = repo().join("docs/src/reference");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| {
            p.strip_prefix(repo())
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    pages.sort();
    pages
}

/// Splits a table row into cells (`\|` does not split).
fn cells(row: &str) -> Vec<String> {
    let row = row.trim().trim_start_matches('|');
    let row = row.strip_suffix('|').unwrap_or(row);
    let mut out = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' && chars.peek() == Some(&'|') {
            out.last_mut().expect("a cell").push('|');
            chars.next();
        } else if c == '|' {
            out.push(String::new());
        } else {
            out.last_mut().expect("a cell").push(c);
        }
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The words in backticks in `text`.
fn code_spans(text: &str) -> Vec<String> {
    text.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.trim().to_string())
        .collect()
}

/// The keys the reference documents, each with the text of its row and where it is.
///
/// The convention: a key table is a Markdown table whose first header cell is `key`. The
/// first cell of each of its rows holds one or more keys, each in backticks as its full
/// dotted path from the top of the file (`network.segment_offload`, `tor.scheduler`); keys of
/// the entries of a list follow `[]` (`clients[].workload.web.size`). Other tables, and keys
/// in prose, are not read.
fn documented_keys() -> (BTreeMap<String, (String, String)>, Vec<String>) {
    let mut keys = BTreeMap::new();
    let mut problems = Vec::new();
    for page in reference_pages() {
        let text = read(&page);
        let lines: Vec<&str> = text.lines().collect();
        let mut fence = false;
        let mut i = 0;
        while i < lines.len() {
            let t = lines[i].trim_start();
            if t.starts_with("```") || t.starts_with("~~~") {
                fence = !fence;
            }
            let is_table = !fence
                && t.starts_with('|')
                && lines
                    .get(i + 1)
                    .is_some_and(|l| l.trim_start().starts_with('|') && l.contains("---"));
            if !is_table {
                i += 1;
                continue;
            }
            let header = cells(lines[i]);
            let key_table = header.first().is_some_and(|h| h == "key");
            i += 2;
            while i < lines.len() && lines[i].trim_start().starts_with('|') {
                if key_table {
                    let at = format!("{}:{}", page.display(), i + 1);
                    let row = cells(lines[i]);
                    let names = code_spans(&row[0]);
                    if names.is_empty() {
                        problems.push(format!("{at}: a key table row without a key in backticks"));
                    }
                    for name in names {
                        if let Some((_, before)) =
                            keys.insert(name.clone(), (lines[i].to_string(), at.clone()))
                        {
                            problems.push(format!(
                                "{at}: `{name}` is documented twice (also {before})"
                            ));
                        }
                    }
                }
                i += 1;
            }
        }
    }
    (keys, problems)
}

#[test]
fn the_schema_walk_finds_known_keys() {
    let keys = parser_keys();
    for k in [
        "name",
        "run.stop_time",
        "network.segment_offload",
        "network.impairments[].loss",
        "tor.scheduler",
        "authorities.count",
        "relays.generate.bandwidth.lognormal.sigma",
        "relays.list[].flags",
        "relays.sample.count",
        "clients[].workload.markov.users",
        "attacks[].victim",
        "cpu.machines[].relays",
        "cpu.costs.cell_other",
        "report.relays",
    ] {
        assert!(keys.contains_key(k), "{k} missing from the walk: {keys:?}");
    }
    assert_eq!(keys["tor.scheduler"], ["kist", "kist_lite", "vanilla"]);
    assert!(
        !keys.contains_key("source"),
        "`source` is not read from files"
    );
    assert!(
        !keys.contains_key("tor.scheduler.kist"),
        "values are not keys"
    );
}

#[test]
fn the_scenario_reference_names_exactly_the_parsers_keys() {
    let accepted = parser_keys();
    let (documented, mut problems) = documented_keys();
    let undocumented: Vec<&String> = accepted
        .keys()
        .filter(|k| !documented.contains_key(*k))
        .collect();
    let unknown: Vec<String> = documented
        .iter()
        .filter(|(k, _)| !accepted.contains_key(*k))
        .map(|(k, (_, at))| format!("`{k}` ({at})"))
        .collect();
    if !undocumented.is_empty() {
        problems.push(format!(
            "keys the parser accepts that no key table of docs/src/reference documents:\n  {}",
            undocumented
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join("\n  ")
        ));
    }
    if !unknown.is_empty() {
        problems.push(format!(
            "keys the reference documents that the parser refuses:\n  {}",
            unknown.join("\n  ")
        ));
    }
    for (key, values) in &accepted {
        let Some((row, at)) = documented.get(key) else {
            continue;
        };
        let written: BTreeSet<String> = code_spans(row).into_iter().collect();
        let missing: Vec<&String> = values.iter().filter(|v| !written.contains(*v)).collect();
        if !missing.is_empty() {
            problems.push(format!(
                "{at}: `{key}` takes {values:?}, but its row does not name {missing:?} in backticks"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the scenario reference and the parser disagree (a key table is a table whose first \
         header cell is `key`; its first column names each key by its full dotted path in \
         backticks, list entries after `[]`):\n{}",
        problems.join("\n")
    );
}

// ------------------------------------------------------------------------------------------
// 3. The README is a front page
// ------------------------------------------------------------------------------------------

#[test]
fn readme_is_at_most_15_kib() {
    let len = std::fs::metadata(repo().join("README.md"))
        .expect("README.md")
        .len();
    assert!(
        len <= 15 * 1024,
        "README.md is {len} bytes, more than 15 KiB: keep the reference in the book under docs/"
    );
}
