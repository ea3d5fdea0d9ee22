//! The real inputs onionlab ships, and the one way input files are read.
//!
//! This crate is part of onionlab, a simulator of Tor networks.
//!
//! # Overview
//!
//! The consensuses, the 2018 relay sample, the 2018 Internet model and the workload models live
//! in the repository's `data/` folder and are compiled into every binary ([`FILES`],
//! [`embedded`]), so built-in scenarios and `data:` references work from any directory with
//! nothing installed beside the binary (`cargo install` copies only the executable). Files the
//! user names on disk go through [`Input::read`] too, so both kinds get the same decompression,
//! the same limits and the same error wording. Where each file comes from, and its licence, is
//! in `data/SOURCES.md`.
//!
//! # Not in this crate
//!
//! This crate returns bytes; it understands no format. Consensuses are parsed by
//! `onionlab-netdir`, graphs by `onionlab-topology`, workload models by `onionlab-traffic`,
//! scenarios and relay samples by `onionlab-scenario`.
//!
//! # Tests
//!
//! Unit tests in `lib.rs` check that the compiled-in table matches the `data/` folder exactly,
//! that every file has a row in `data/SOURCES.md`, that every compressed file decompresses, and
//! how names and files on disk are looked up and refused.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

mod embedded;

pub use embedded::FILES;

/// The most bytes an input file may hold, before and after decompression. The largest shipped
/// input is under 10 MB uncompressed; the limit leaves room for big user graphs while stopping
/// a mistaken `/dev/zero` or an xz bomb before it takes the machine's memory.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// A file compiled into the binary, named by its path under `data/`.
#[derive(Debug)]
pub struct DataFile {
    /// Path under the repository's `data/` folder, with `/` separators and any `.xz` suffix.
    pub path: &'static str,
    /// The file's bytes as stored (still compressed when `path` ends in `.xz`).
    pub bytes: &'static [u8],
}

/// Finds a shipped file by its path under `data/`. The `.xz` suffix may be left out, so
/// references written before the large files were compressed keep working.
pub fn embedded(path: &str) -> Option<&'static DataFile> {
    let path = path.trim_start_matches("./");
    FILES.iter().find(|f| f.path == path).or_else(|| {
        FILES
            .iter()
            .find(|f| f.path.strip_suffix(".xz") == Some(path))
    })
}

/// Where an input comes from: a shipped file or a file on disk.
#[derive(Clone, Debug)]
pub enum Input {
    /// A file compiled into the binary, named in a scenario as `data:<path>`.
    Embedded(&'static DataFile),
    /// A file on disk, read when the input is needed.
    File(PathBuf),
}

impl Input {
    /// The file name, which decides the format (and whether it is xz-compressed).
    pub fn file_name(&self) -> String {
        match self {
            Input::Embedded(f) => f.path.rsplit('/').next().unwrap_or(f.path).to_string(),
            Input::File(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }
    }

    /// Reads the whole input, decompressing it when its name ends in `.xz`. Refuses what is
    /// not a regular file and anything over [`MAX_INPUT_BYTES`]; the error says which and
    /// leaves naming the input to the caller.
    pub fn read(&self) -> Result<Vec<u8>, String> {
        let compressed = self.file_name().ends_with(".xz");
        match self {
            Input::Embedded(f) if compressed => decompress(f.bytes),
            Input::Embedded(f) => Ok(f.bytes.to_vec()),
            Input::File(p) => {
                let raw = read_regular_file(p)?;
                if compressed {
                    decompress(&raw)
                } else {
                    Ok(raw)
                }
            }
        }
    }
}

impl fmt::Display for Input {
    /// `data:<path>` for shipped files (what a scenario may write to name them), the path for
    /// files on disk.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Input::Embedded(d) => write!(f, "data:{}", d.path),
            Input::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Checks that `path` names a regular file (following links) of at most [`MAX_INPUT_BYTES`],
/// without reading it, so validation can refuse a device, a directory or a fifo early.
pub fn check_regular_file(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "does not exist".to_string(),
        _ => format!("cannot open: {}", io_words(&e)),
    })?;
    if meta.is_dir() {
        return Err("is a directory, expected a file".into());
    }
    if !meta.is_file() {
        return Err(
            "is not a regular file (a device, fifo or socket cannot be read as input)".into(),
        );
    }
    if meta.len() > MAX_INPUT_BYTES {
        return Err(format!(
            "is {} bytes, more than the {MAX_INPUT_BYTES} bytes an input file may hold",
            meta.len()
        ));
    }
    Ok(())
}

fn read_regular_file(path: &Path) -> Result<Vec<u8>, String> {
    check_regular_file(path)?;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot open: {}", io_words(&e)))?;
    let mut bytes = Vec::new();
    // The size was checked above, but a file can grow between the check and the read.
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {}", io_words(&e)))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!(
            "holds more than the {MAX_INPUT_BYTES} bytes an input file may hold"
        ));
    }
    Ok(bytes)
}

fn decompress(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    liblzma::read::XzDecoder::new(bytes)
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| {
            let why = match e.kind() {
                std::io::ErrorKind::UnexpectedEof => "the xz data is cut short",
                std::io::ErrorKind::InvalidData => {
                    "the xz data is damaged, or the file is not xz-compressed"
                }
                _ => "the xz data uses options or checks this decoder does not support",
            };
            format!("cannot decompress: {why} (a name ending in .xz means xz-compressed)")
        })?;
    if out.len() as u64 > MAX_INPUT_BYTES {
        return Err(format!(
            "decompresses to more than the {MAX_INPUT_BYTES} bytes an input may hold"
        ));
    }
    Ok(out)
}

/// An operating-system error in our words: what went wrong with the file, without the
/// library's "(os error 2)" suffix and kind names.
pub fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    let words = match e.kind() {
        K::NotFound => "no such file or directory",
        K::PermissionDenied => "permission denied",
        K::AlreadyExists => "it already exists",
        K::NotADirectory => "a part of the path is a file, not a directory",
        K::IsADirectory => "it is a directory",
        K::DirectoryNotEmpty => "the directory is not empty",
        K::ReadOnlyFilesystem => "the file system is read-only",
        K::StorageFull => "the disk is full",
        K::QuotaExceeded => "the disk quota is used up",
        K::FileTooLarge => "the file is too large for the file system",
        K::InvalidFilename => "the name is too long or not allowed by the file system",
        K::OutOfMemory => "out of memory",
        K::Interrupted => "interrupted",
        K::UnexpectedEof => "it ends too early",
        _ => {
            // Errors we made ourselves carry their own words; the system's keep theirs
            // without the error number.
            let text = e.to_string();
            return match text.rfind(" (os error ") {
                Some(i) if text.ends_with(')') => text[..i].to_lowercase(),
                _ => text,
            };
        }
    };
    match e.raw_os_error() {
        // A custom error (made with its own message) says more than its kind does.
        None if e.get_ref().is_some() => e.to_string(),
        _ => words.to_string(),
    }
}

/// Bytes as UTF-8 text, or where they stop being: "line 12, column 4 holds a byte (0xff) that
/// is not UTF-8 text", so that a stray byte can be found in an editor.
pub fn utf8_text(bytes: Vec<u8>) -> Result<String, String> {
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let before = &bytes[..at];
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        // Columns count characters, and everything before `at` is valid UTF-8.
        let column = String::from_utf8_lossy(&before[line_start..])
            .chars()
            .count()
            + 1;
        format!(
            "is not UTF-8 text: line {line}, column {column} holds a byte (0x{:02x}) that is \
             not UTF-8",
            bytes[at]
        )
    })
}

/// Messages about an input quote what it says, and a hostile file can say megabytes in one
/// word (a node id or a duration of a million digits): every word longer than a person reads
/// is cut to its start, its closing quote and its length. Every parser's errors go through it.
pub fn clip(message: String) -> String {
    const LONGEST: usize = 48;
    const KEEP: usize = 32;
    if message
        .split_whitespace()
        .all(|w| w.chars().count() <= LONGEST)
    {
        return message;
    }
    let mut out = String::new();
    for piece in message.split_inclusive(char::is_whitespace) {
        let word = piece.trim_end_matches(char::is_whitespace);
        let space = &piece[word.len()..];
        let n = word.chars().count();
        if n <= LONGEST {
            out.push_str(piece);
            continue;
        }
        out.extend(word.chars().take(KEEP));
        out.push('…');
        if let Some(last) = word.chars().last().filter(|c| !c.is_alphanumeric()) {
            out.push(last);
        }
        out.push_str(&format!(" ({n} characters)"));
        out.push_str(space);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn data_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data")
    }

    /// Every file in `data/` (but its SOURCES.md) is compiled in, and nothing else is: a file
    /// added to the folder but not to the table would work from the checkout and fail once
    /// installed.
    #[test]
    fn table_matches_the_data_folder() {
        let mut on_disk = BTreeSet::new();
        let mut dirs = vec![data_dir()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else {
                    let rel = p.strip_prefix(data_dir()).unwrap();
                    on_disk.insert(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        on_disk.remove("SOURCES.md");
        let table: BTreeSet<String> = FILES.iter().map(|f| f.path.to_string()).collect();
        assert_eq!(table, on_disk);
        for f in FILES {
            let disk = std::fs::read(data_dir().join(f.path)).unwrap();
            assert!(disk == f.bytes, "{} differs from the file on disk", f.path);
        }
    }

    /// SOURCES.md accounts for every shipped file.
    #[test]
    fn every_file_has_a_source() {
        let sources = std::fs::read_to_string(data_dir().join("SOURCES.md")).unwrap();
        for f in FILES {
            assert!(
                sources.contains(&format!("`{}`", f.path)),
                "{} is not described in data/SOURCES.md",
                f.path
            );
        }
    }

    #[test]
    fn every_compressed_file_decompresses() {
        for f in FILES.iter().filter(|f| f.path.ends_with(".xz")) {
            let text = Input::Embedded(f).read().unwrap();
            assert!(text.len() > f.bytes.len(), "{}", f.path);
        }
    }

    #[test]
    fn lookup_with_and_without_xz() {
        let a = embedded("consensus/2023-06-01-10-00-00-consensus").unwrap();
        let b = embedded("consensus/2023-06-01-10-00-00-consensus.xz").unwrap();
        assert!(std::ptr::eq(a, b));
        assert_eq!(
            Input::Embedded(a).to_string(),
            "data:consensus/2023-06-01-10-00-00-consensus.xz"
        );
        assert!(embedded("relays/relays-2018-1998.csv").is_some());
        assert!(embedded("relays/nothing.csv").is_none());
        assert!(embedded("relays").is_none());
        let text = Input::Embedded(a).read().unwrap();
        assert!(text.starts_with(b"network-status-version 3"));
    }

    #[test]
    fn text_that_is_not_utf8_is_located() {
        assert_eq!(utf8_text(b"a\nb".to_vec()).unwrap(), "a\nb");
        let e = utf8_text(b"name: x\nr\xc3\xa9sum\xff\n".to_vec()).unwrap_err();
        assert_eq!(
            e,
            "is not UTF-8 text: line 2, column 6 holds a byte (0xff) that is not UTF-8"
        );
    }

    #[test]
    fn system_errors_in_our_words() {
        use std::io::{Error, ErrorKind};
        let e = std::fs::read("/nonexistent-onionlab/x").unwrap_err();
        assert_eq!(io_words(&e), "no such file or directory");
        let e = std::fs::read("/etc/hostname/x").unwrap_err();
        assert_eq!(
            io_words(&e),
            "a part of the path is a file, not a directory"
        );
        assert_eq!(io_words(&Error::from_raw_os_error(5)), "input/output error");
        let own = Error::new(ErrorKind::NotADirectory, "a is a file, not a directory");
        assert_eq!(io_words(&own), "a is a file, not a directory");
    }

    #[test]
    fn files_on_disk() {
        let dir = std::env::temp_dir().join(format!("onionlab-data-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("a.txt");
        std::fs::write(&plain, b"hello").unwrap();
        assert_eq!(Input::File(plain.clone()).read().unwrap(), b"hello");
        let xz = dir.join("a.txt.xz");
        let mut enc = Vec::new();
        liblzma::read::XzEncoder::new(&b"hello"[..], 6)
            .read_to_end(&mut enc)
            .unwrap();
        std::fs::write(&xz, &enc).unwrap();
        assert_eq!(Input::File(xz).read().unwrap(), b"hello");
        let bad = dir.join("b.xz");
        std::fs::write(&bad, b"plain text that is not xz-compressed at all").unwrap();
        let e = Input::File(bad).read().unwrap_err();
        assert!(
            e.contains("cannot decompress: the xz data is damaged"),
            "{e}"
        );
        let cut = dir.join("c.txt.xz");
        std::fs::write(&cut, &enc[..enc.len() - 8]).unwrap();
        let e = Input::File(cut).read().unwrap_err();
        assert!(
            e.contains("cannot decompress: the xz data is cut short"),
            "{e}"
        );
        let e = Input::File(dir.clone()).read().unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let e = Input::File(dir.join("missing")).read().unwrap_err();
        assert_eq!(e, "does not exist");
        let e = Input::File("/dev/zero".into()).read().unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
