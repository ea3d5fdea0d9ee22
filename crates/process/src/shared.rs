//! The page a managed process and onionlab share, as `shim/shared.h` lays it out: this
//! struct must keep the header's layout (`layout_matches_the_header` compiles the header and
//! compares offsets).

/// Marks a page as onionlab's ("onionlab" in little-endian ASCII).
pub const MAGIC: u64 = 0x6261_6c6e_6f69_6e6f;
/// The layout's version; the shim refuses a page of another.
pub const VERSION: u32 = 2;
/// Bytes a request or reply may carry in [`Shared::data`].
pub const DATA_BYTES: usize = 65536;
/// Descriptors below this number may be served by onionlab ([`Shared::virtual_fds`]).
pub const MAX_FDS: usize = 1024;
/// How many threads a process may have at once ([`Shared::threads`]).
pub const MAX_THREADS: usize = 128;

/// `turn`: the process runs.
pub const TURN_PROCESS: u32 = 1;
/// `turn`: onionlab decides a request.
pub const TURN_SIMULATOR: u32 = 2;
/// A thread's `turn`: it waits for its turn.
pub const THREAD_WAIT: u32 = 0;
/// A thread's `turn`: it may run.
pub const THREAD_GO: u32 = 1;

/// A request that is not a system call: the shim is in place and the program is about to run.
pub const REQ_START: i64 = -1;
/// A request that is not a system call: the program opened a path onionlab serves (a random
/// device); `args[0]` is the placeholder descriptor, `data` the path with its NUL.
pub const REQ_OPEN_VIRTUAL: i64 = -2;
/// A request that is not a system call: the shim could not make the real thread for the slot
/// `args[0]` that `clone` gave it.
pub const REQ_THREAD_FAILED: i64 = -3;

/// `reply`: `ret` is the result and `out_len` bytes of `data` go back to the program.
pub const REPLY_DONE: u32 = 0;
/// `reply`: the shim makes the call natively.
pub const REPLY_NATIVE: u32 = 1;

/// One thread's entry in [`Shared::threads`] (`struct ol_thread`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ThreadEntry {
    /// [`THREAD_GO`] while the thread may run, [`THREAD_WAIT`] while it waits: the word it
    /// waits on.
    pub turn: u32,
    /// The real thread's id while it lives; Linux clears it and wakes its waiters when the
    /// thread has ended.
    pub alive: u32,
    /// Its simulated id.
    pub tid: i32,
    /// Padding, as in the header.
    pub pad: u32,
    /// The program's word cleared when the thread ends (0: none); the shim's business.
    pub clear_tid: u64,
}

/// The shared page (`struct ol_shared`).
#[repr(C)]
pub struct Shared {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`VERSION`].
    pub version: u32,
    /// Whose turn it is ([`TURN_PROCESS`] or [`TURN_SIMULATOR`]): the futex word.
    pub turn: u32,
    /// The process's simulated pid, which `getpid` (and the main thread's `gettid`) return.
    pub pid: i32,
    /// The slot of the thread that made the request.
    pub current: u32,
    /// Simulated wall-clock time, nanoseconds since the Unix epoch.
    pub now_ns: i64,
    /// The request: a system call number or a `REQ_*`.
    pub nr: i64,
    /// The request's six arguments, as the program passed them.
    pub args: [i64; 6],
    /// Bytes of `data` the request carries.
    pub in_len: u32,
    /// Bytes of `data` the reply carries.
    pub out_len: u32,
    /// The reply's result (a negative errno on failure).
    pub ret: i64,
    /// [`REPLY_DONE`] or [`REPLY_NATIVE`].
    pub reply: u32,
    /// Padding, as in the header.
    pub pad1: u32,
    /// The threads, by slot.
    pub threads: [ThreadEntry; MAX_THREADS],
    /// Descriptors onionlab serves: bit `n % 8` of byte `n / 8` for descriptor `n`.
    pub virtual_fds: [u8; MAX_FDS / 8],
    /// What a request or reply carries.
    pub data: [u8; DATA_BYTES],
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// Compiles a program that prints the header's offsets and compares them with this
    /// struct's: the two sides of the page must agree byte for byte.
    #[test]
    fn layout_matches_the_header() {
        let dir = std::env::temp_dir().join(format!("onionlab-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("layout.c");
        let fields = [
            "magic",
            "version",
            "turn",
            "pid",
            "current",
            "now_ns",
            "nr",
            "args",
            "in_len",
            "out_len",
            "ret",
            "reply",
            "threads",
            "virtual_fds",
            "data",
        ];
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include \"shared.h\"\nint main(void){\n",
        );
        for f in fields {
            c += &format!("printf(\"%zu\\n\", offsetof(struct ol_shared, {f}));\n");
        }
        c += "printf(\"%zu\\n\", sizeof(struct ol_shared));\nprintf(\"%zu %zu %zu\\n\", sizeof(struct ol_thread), offsetof(struct ol_thread, tid), offsetof(struct ol_thread, clear_tid));\nprintf(\"%llu %u %u %d %d %d %u %u %u %u %u\\n\", OL_MAGIC, OL_VERSION, OL_DATA_BYTES, OL_REQ_START, OL_REQ_OPEN_VIRTUAL, OL_REQ_THREAD_FAILED, OL_TURN_PROCESS, OL_TURN_SIMULATOR, OL_THREAD_WAIT, OL_THREAD_GO, OL_MAX_THREADS);\nreturn 0;}\n";
        std::fs::write(&src, c).unwrap();
        let exe = dir.join("layout");
        let include = concat!(env!("CARGO_MANIFEST_DIR"), "/shim");
        let status = std::process::Command::new("cc")
            .arg("-I")
            .arg(include)
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .status()
            .unwrap();
        assert!(status.success());
        let out = std::process::Command::new(&exe).output().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let ours = [
            offset_of!(Shared, magic),
            offset_of!(Shared, version),
            offset_of!(Shared, turn),
            offset_of!(Shared, pid),
            offset_of!(Shared, current),
            offset_of!(Shared, now_ns),
            offset_of!(Shared, nr),
            offset_of!(Shared, args),
            offset_of!(Shared, in_len),
            offset_of!(Shared, out_len),
            offset_of!(Shared, ret),
            offset_of!(Shared, reply),
            offset_of!(Shared, threads),
            offset_of!(Shared, virtual_fds),
            offset_of!(Shared, data),
            std::mem::size_of::<Shared>(),
        ];
        for (i, want) in ours.iter().enumerate() {
            assert_eq!(lines[i], want.to_string(), "field {i} of the shared page");
        }
        assert_eq!(
            lines[ours.len()],
            format!(
                "{} {} {}",
                std::mem::size_of::<ThreadEntry>(),
                offset_of!(ThreadEntry, tid),
                offset_of!(ThreadEntry, clear_tid)
            )
        );
        assert_eq!(
            lines[ours.len() + 1],
            format!(
                "{MAGIC} {VERSION} {DATA_BYTES} {REQ_START} {REQ_OPEN_VIRTUAL} {REQ_THREAD_FAILED} \
                 {TURN_PROCESS} {TURN_SIMULATOR} {THREAD_WAIT} {THREAD_GO} {MAX_THREADS}"
            )
        );
    }
}
