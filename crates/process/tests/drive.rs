//! A managed process driven by the simulated kernel alone, without the engine: simulated
//! time jumps to each blocked call's deadline. What the process host does, in a loop.

use std::path::{Path, PathBuf};
use std::time::Duration;

use onionlab_kernel::{Call, Kernel, Offline, Outcome, Resume, MAIN_THREAD};
use onionlab_process::{install_shim, programs, Exit, ManagedProcess, ProcessSpec, Turn};

const EPOCH_NS: i64 = 946_684_800_000_000_000;

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `program` (one thread) to its end; returns its exit, its stdout and the kernel.
fn drive(program: &str, dir: &Path) -> (Exit, String, Kernel<onionlab_engine::rng::HostRng, u32>) {
    let exe = programs::build(
        program,
        &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("programs"),
    )
    .unwrap();
    let shim = install_shim(dir).unwrap();
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let spec = ProcessSpec {
        program: &exe,
        args: &[],
        env: &[],
        dir: &work,
        shim: &shim,
        hosts_file: None,
        pid: 1000,
    };
    let mut now = 0u64;
    let mut kernel = Kernel::new(
        "proc-host",
        1000,
        EPOCH_NS,
        onionlab_engine::host_rng(7, 1, 1),
    );
    let mut p =
        ManagedProcess::spawn(&spec, kernel.wall_clock_ns(now), Duration::from_secs(10)).unwrap();
    let mut out = Vec::new();
    let mut outcome = {
        let r = p.request();
        kernel.call(
            now,
            &Call {
                nr: r.nr,
                args: r.args,
                data: r.data,
            },
            &mut out,
            &mut Offline,
        )
    };
    let exit = loop {
        match outcome {
            Outcome::Done(ret) => p.reply(0, ret, &out),
            Outcome::Blocked { until } => {
                // Nothing else happens on this host: time jumps to the call's limit.
                now = until.expect("only sleeps block here");
                p.set_now(kernel.wall_clock_ns(now));
                kernel.wake(MAIN_THREAD, now, &mut Offline);
                match kernel.resume(&mut out) {
                    Some((MAIN_THREAD, Resume::Reply(ret))) => outcome = Outcome::Done(ret),
                    other => panic!("the main thread is the one to resume, not {other:?}"),
                }
                continue;
            }
            Outcome::ThreadExit => panic!("one thread only"),
            Outcome::Exit(code) => {
                p.reply(0, 0, &[]);
                let exit = p.finish();
                assert_eq!(exit, Exit::Code(code));
                break exit;
            }
        }
        p.set_virtual_fds(kernel.virtual_fds());
        match p.wait() {
            Turn::Request => {
                let r = p.request();
                outcome = kernel.call(
                    now,
                    &Call {
                        nr: r.nr,
                        args: r.args,
                        data: r.data,
                    },
                    &mut out,
                    &mut Offline,
                );
            }
            Turn::Exited(exit) => break exit,
            Turn::Stalled | Turn::Stopped => panic!("stalled"),
        }
    };
    let stdout = std::fs::read_to_string(work.join("stdout")).unwrap();
    (exit, stdout, kernel)
}

#[test]
fn the_clock_program_sees_simulated_time_and_the_host_stream() {
    let dir = scratch("clock-a");
    let (exit, stdout, kernel) = drive("clock", &dir);
    eprintln!("{stdout}");
    assert_eq!(exit, Exit::Code(3));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "start: realtime 946684800.000000000 monotonic 946684800.000000000 gettimeofday 946684800.000000 time 946684800");
    assert!(
        lines[1].starts_with("after nanosleep 1.5 s: realtime 946684801.500000000 "),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].starts_with("after clock_nanosleep to +2 s 250 ns: realtime 946684803.000000250 "),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].starts_with("after usleep 20 ms: realtime 946684803.020000250 "),
        "{}",
        lines[3]
    );
    assert!(
        stdout.contains(
            "uname: Linux proc-host x86_64\nhostname: proc-host pid 1000 ppid 1\n\
             sysinfo: uptime 3 s, memory 16384 MiB, free 8192 MiB\n\
             descriptor limit 1024 1024\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("inotify_init1 returned -1 errno Function not implemented\n"),
        "{stdout}"
    );
    assert_eq!(kernel.unsupported(), vec![("inotify_init1".to_string(), 1)]);
    let note = std::fs::read_to_string(dir.join("work/note.txt")).unwrap();
    assert_eq!(note, "written natively in the process's directory\n");
    // The same run again gives the same output, byte for byte.
    let (_, again, _) = drive("clock", &scratch("clock-b"));
    assert_eq!(stdout, again);
}
