//! Errors from reading directory documents.

/// A problem in a directory document, located so a user can open the file at the right line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {message}", line_suffix(.line))]
pub struct DirError {
    /// The file name (or whatever label the caller passed as the source).
    pub file: String,
    /// 1-based line number; `None` for whole-file problems (unreadable, truncated, empty).
    pub line: Option<usize>,
    /// What is wrong, in words for the user, clipped to a bounded length.
    pub message: String,
}

fn line_suffix(line: &Option<usize>) -> String {
    match line {
        Some(n) => format!(":{n}"),
        None => String::new(),
    }
}

impl DirError {
    pub(crate) fn at(file: &str, line: usize, message: impl Into<String>) -> Self {
        DirError {
            file: file.to_string(),
            line: Some(line),
            message: onionlab_data::clip(message.into()),
        }
    }

    pub(crate) fn whole(file: &str, message: impl Into<String>) -> Self {
        DirError {
            file: file.to_string(),
            line: None,
            message: onionlab_data::clip(message.into()),
        }
    }
}
