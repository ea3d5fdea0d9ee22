//! Whether a file is a program the shim can run: a dynamically linked x86-64 ELF executable.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const EM_X86_64: u16 = 62;
const PT_INTERP: u32 = 3;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;

/// Checks that `path` names a program a managed process can run, and says why not in a
/// sentence that names the file: it must exist, be a regular file we may execute, and be a
/// 64-bit x86-64 ELF executable with a program interpreter (dynamically linked), since the
/// shim is loaded by the dynamic loader.
pub fn check_binary(path: &Path) -> Result<(), String> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("{shown}: cannot be read: {}", onionlab_data::io_words(&e)))?;
    if !meta.is_file() {
        return Err(format!("{shown}: not a regular file"));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("{shown}: not executable (no x permission)"));
    }
    let mut header = Vec::with_capacity(4096);
    std::fs::File::open(path)
        .and_then(|f| f.take(65536).read_to_end(&mut header))
        .map_err(|e| format!("{shown}: cannot be read: {}", onionlab_data::io_words(&e)))?;
    if header.len() < 64 || &header[..4] != b"\x7fELF" {
        let what = if header.starts_with(b"#!") {
            "a script; name the interpreter's program instead"
        } else {
            "not an ELF executable"
        };
        return Err(format!("{shown}: {what}"));
    }
    let u16_at = |o: usize| u16::from_le_bytes([header[o], header[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(header[o..o + 4].try_into().expect("4 bytes"));
    let u64_at = |o: usize| u64::from_le_bytes(header[o..o + 8].try_into().expect("8 bytes"));
    if header[4] != 2 || header[5] != 1 || u16_at(18) != EM_X86_64 {
        return Err(format!(
            "{shown}: built for another architecture (managed processes run x86-64 Linux programs)"
        ));
    }
    if !matches!(u16_at(16), ET_EXEC | ET_DYN) {
        return Err(format!("{shown}: an ELF file but not an executable"));
    }
    let (phoff, phentsize, phnum) = (
        u64_at(32) as usize,
        u16_at(54) as usize,
        u16_at(56) as usize,
    );
    let interp = (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        at + 4 <= header.len() && u32_at(at) == PT_INTERP
    });
    if !interp {
        return Err(format!(
            "{shown}: statically linked; the shim is loaded by the dynamic loader, so a managed \
             process must be dynamically linked"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_passes_and_other_files_are_named() {
        assert_eq!(check_binary(Path::new("/bin/sh")), Ok(()));
        let missing = check_binary(Path::new("/no/such/program")).unwrap_err();
        assert!(
            missing.starts_with("/no/such/program: cannot be read"),
            "{missing}"
        );
        let dir = check_binary(Path::new("/")).unwrap_err();
        assert!(dir.contains("not a regular file"), "{dir}");
        let tmp = std::env::temp_dir().join(format!("onionlab-bin-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let script = tmp.join("script");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        let text = check_binary(&script).unwrap_err();
        assert!(text.contains("not executable"), "{text}");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let text = check_binary(&script).unwrap_err();
        assert!(text.contains("a script"), "{text}");
        let mut arm = std::fs::read("/bin/sh").unwrap();
        arm[18] = 183; // EM_AARCH64
        let other = tmp.join("arm");
        std::fs::write(&other, arm).unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
        let text = check_binary(&other).unwrap_err();
        assert!(text.contains("another architecture"), "{text}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
