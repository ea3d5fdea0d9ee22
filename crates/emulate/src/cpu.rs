//! CPU time the emulated tors and the emulator itself spent while the workload ran, from the
//! kernel's per-process accounting.
//!
//! The simulator's relay CPU model is checked against these figures. On a small machine every
//! tor and the emulator's own threads (switch, workload, control-port monitors) compete for the
//! same cores, so the emulator is recorded too: a busy switch is CPU the tors did not get.
//! Only the difference between two readings is kept, because key generation, start-up and
//! bootstrap would otherwise dominate what a short run measured.

use std::time::Instant;

/// A process's CPU time so far, in clock ticks, as `/proc/PID/stat` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticks {
    /// Time spent in user mode, in clock ticks (`utime`, field 14).
    pub user: u64,
    /// Time spent in the kernel on the process's behalf, in clock ticks (`stime`, field 15).
    pub system: u64,
    /// When the process started (ticks after boot). Two readings with different start times
    /// are of different processes: the first one ended and its PID was reused.
    pub started: u64,
}

/// Reads a `/proc/PID/stat` line; `None` for anything that is not one.
pub fn parse_stat(text: &str) -> Option<Ticks> {
    // Field 2, the command name, is in parentheses and neither escaped nor free of spaces or
    // parentheses, so it ends only at the line's last ')': the fields after it are numbers
    // and one state letter.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    if close < open || text[..open].trim().parse::<u32>().is_err() {
        return None;
    }
    let rest: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // `rest[0]` is field 3 (the state); fields are numbered from 1 in proc(5).
    let field = |n: usize| rest.get(n - 3)?.parse::<u64>().ok();
    Some(Ticks {
        user: field(14)?,
        system: field(15)?,
        started: field(22)?,
    })
}

/// CPU time so far of process `pid`; `None` once it has gone (or was never there).
pub fn read_process(pid: u32) -> Option<Ticks> {
    read_stat(&format!("/proc/{pid}/stat"))
}

/// CPU time so far of this process, all its threads together (those that have ended too).
pub fn read_self() -> Option<Ticks> {
    read_stat("/proc/self/stat")
}

fn read_stat(path: &str) -> Option<Ticks> {
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// The unit of `/proc/PID/stat`'s times (100 on every Linux in practice, but it is the
/// kernel's to say).
pub fn clock_ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(n).ok().filter(|&n| n > 0)
}

/// A tor whose CPU time is recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Process {
    /// The scenario's name for the host.
    pub name: String,
    /// `relay`, `authority` or `client`.
    pub role: &'static str,
    /// The tor process's id.
    pub pid: u32,
}

/// Every recorded process's CPU time at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// When the snapshot was taken (wall clock).
    pub at: Instant,
    /// In the order of the processes it was taken of.
    pub tors: Vec<Option<Ticks>>,
    /// The emulator's own process, all its threads together.
    pub emulator: Option<Ticks>,
}

impl Snapshot {
    /// Reads the CPU time of every process of `tors` and of the emulator now; a process that
    /// has gone reads as `None`.
    pub fn take(tors: &[Process]) -> Snapshot {
        Snapshot {
            at: Instant::now(),
            tors: tors.iter().map(|p| read_process(p.pid)).collect(),
            emulator: read_self(),
        }
    }
}

/// CPU seconds spent in a period.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuUse {
    /// CPU seconds in user mode.
    pub user_s: f64,
    /// CPU seconds in the kernel.
    pub system_s: f64,
}

impl CpuUse {
    /// User and kernel CPU seconds together.
    pub fn total_s(&self) -> f64 {
        self.user_s + self.system_s
    }
}

/// What one process used between two readings; `None` when either reading is missing or the
/// two are not of the same process.
pub fn used(first: Option<Ticks>, last: Option<Ticks>, ticks_per_second: u64) -> Option<CpuUse> {
    let (a, b) = (first?, last?);
    if a.started != b.started || ticks_per_second == 0 {
        return None;
    }
    let seconds = |from: u64, to: u64| Some(to.checked_sub(from)? as f64 / ticks_per_second as f64);
    Some(CpuUse {
        user_s: seconds(a.user, b.user)?,
        system_s: seconds(a.system, b.system)?,
    })
}

/// One tor's share of the measured period.
#[derive(Clone, Debug, PartialEq)]
pub struct TorCpu {
    /// The scenario's name for the host.
    pub name: String,
    /// `relay`, `authority` or `client`.
    pub role: &'static str,
    /// `None` if the tor was gone by the end (it exited, and was reaped).
    pub used: Option<CpuUse>,
}

/// The CPU the measured period cost.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuReport {
    /// Wall seconds between the two readings.
    pub measured_seconds: f64,
    /// The unit of the kernel's readings ([`clock_ticks_per_second`]).
    pub clock_ticks_per_second: u64,
    /// Each tor's use, in the order of the processes given.
    pub tors: Vec<TorCpu>,
    /// The emulator's own use (switch, workload, monitors); `None` if a reading failed.
    pub emulator: Option<CpuUse>,
    /// Cores this process may run on, which the tors share with it.
    pub machine_cores: usize,
}

impl CpuReport {
    /// The period from `first` to `last`, both taken of `tors`.
    pub fn between(
        tors: &[Process],
        first: &Snapshot,
        last: &Snapshot,
        clock_ticks_per_second: u64,
        machine_cores: usize,
    ) -> CpuReport {
        let reading = |s: &Snapshot, i: usize| s.tors.get(i).copied().flatten();
        CpuReport {
            measured_seconds: last.at.saturating_duration_since(first.at).as_secs_f64(),
            clock_ticks_per_second,
            tors: tors
                .iter()
                .enumerate()
                .map(|(i, p)| TorCpu {
                    name: p.name.clone(),
                    role: p.role,
                    used: used(reading(first, i), reading(last, i), clock_ticks_per_second),
                })
                .collect(),
            emulator: used(first.emulator, last.emulator, clock_ticks_per_second),
            machine_cores,
        }
    }

    /// Cores' worth of CPU that `cpu` kept busy on average over the period.
    pub fn cores(&self, cpu: &CpuUse) -> f64 {
        self.per_second(cpu.total_s())
    }

    fn per_second(&self, cpu_s: f64) -> f64 {
        if self.measured_seconds > 0.0 {
            cpu_s / self.measured_seconds
        } else {
            0.0
        }
    }

    /// One line for the terminal: the busiest relay, and whether the tors and the emulator
    /// together came near the machine's cores (then CPU, not the links, may have limited the
    /// run).
    pub fn summary(&self) -> String {
        let busiest = self
            .tors
            .iter()
            .filter(|t| t.role == "relay")
            .filter_map(|t| Some((t, t.used?)))
            .max_by(|(_, a), (_, b)| a.total_s().total_cmp(&b.total_s()));
        let mut line = format!("CPU over the {:.0} s measured: ", self.measured_seconds);
        match busiest {
            Some((t, u)) => line.push_str(&format!(
                "busiest relay {} {:.1}% of a core ({:.1}% user, {:.1}% system)",
                t.name,
                100.0 * self.cores(&u),
                100.0 * self.per_second(u.user_s),
                100.0 * self.per_second(u.system_s),
            )),
            None => line.push_str("no relay CPU figures"),
        }
        let known: Vec<CpuUse> = self.tors.iter().filter_map(|t| t.used).collect();
        let tors = known.iter().map(|u| self.cores(u)).sum::<f64>();
        line.push_str(&format!("; {} tors {tors:.2} cores", known.len()));
        if let Some(e) = &self.emulator {
            line.push_str(&format!(" and the emulator {:.2}", self.cores(e)));
        }
        line.push_str(&format!(", of the machine's {}", self.machine_cores));
        let gone: Vec<&str> = self
            .tors
            .iter()
            .filter(|t| t.used.is_none())
            .map(|t| t.name.as_str())
            .collect();
        if !gone.is_empty() {
            line.push_str(&format!(" (no figure for {})", gone.join(", ")));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A stat line as Linux 6 writes it, with `comm` in place and utime 1234, stime 56 and
    /// start time 789.
    fn stat_line(comm: &str) -> String {
        format!(
            "4242 ({comm}) S 1 4242 4242 0 -1 4194560 3000 0 2 0 1234 56 0 0 20 0 3 0 789 \
             123456789 4000 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 17 1 0 0 0 0 0\n"
        )
    }

    const TICKS: Ticks = Ticks {
        user: 1234,
        system: 56,
        started: 789,
    };

    #[test]
    fn plain_stat_line() {
        assert_eq!(parse_stat(&stat_line("tor")), Some(TICKS));
    }

    #[test]
    fn command_names_with_spaces_and_parentheses() {
        for comm in [
            "tor main",
            "a) S 1 2 3",
            "((",
            ")",
            "x) 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 (",
        ] {
            assert_eq!(parse_stat(&stat_line(comm)), Some(TICKS), "{comm:?}");
        }
    }

    #[test]
    fn garbled_lines_give_nothing() {
        let full = stat_line("tor");
        let cut = full.find(" 1234 ").unwrap();
        for bad in [
            "",
            "\n",
            "4242",
            "4242 (tor",
            "4242 tor) S 1",
            ") 4242 (tor S 1",
            "(tor) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
            &full[..cut],
            &full.replace(" 1234 ", " 12x4 "),
            &full.replace(" 56 ", " -56 "),
        ] {
            assert_eq!(parse_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn this_process_can_be_read() {
        let me = read_self().expect("/proc/self/stat");
        assert_eq!(
            read_process(std::process::id()).map(|t| t.started),
            Some(me.started)
        );
        assert_eq!(read_process(u32::MAX), None);
        assert_eq!(clock_ticks_per_second().map(|n| n > 0), Some(true));
    }

    #[test]
    fn the_period_is_the_difference_of_its_two_readings() {
        let later = Ticks {
            user: TICKS.user + 250,
            system: TICKS.system + 30,
            ..TICKS
        };
        assert_eq!(
            used(Some(TICKS), Some(later), 100),
            Some(CpuUse {
                user_s: 2.5,
                system_s: 0.3
            })
        );
        assert_eq!(
            used(Some(TICKS), Some(TICKS), 100).map(|u| u.total_s()),
            Some(0.0)
        );
        // Gone at either end, or its PID now someone else's: no figure.
        assert_eq!(used(None, Some(later), 100), None);
        assert_eq!(used(Some(TICKS), None, 100), None);
        let other = Ticks {
            started: TICKS.started + 1,
            ..later
        };
        assert_eq!(used(Some(TICKS), Some(other), 100), None);
        let backwards = Ticks {
            user: TICKS.user - 1,
            ..TICKS
        };
        assert_eq!(used(Some(TICKS), Some(backwards), 100), None);
        assert_eq!(used(Some(TICKS), Some(later), 0), None);
    }

    fn report() -> CpuReport {
        let tors = vec![
            Process {
                name: "auth1".into(),
                role: "authority",
                pid: 1,
            },
            Process {
                name: "guard".into(),
                role: "relay",
                pid: 2,
            },
            Process {
                name: "exit".into(),
                role: "relay",
                pid: 3,
            },
            Process {
                name: "client".into(),
                role: "client",
                pid: 4,
            },
        ];
        let t = |user, system| {
            Some(Ticks {
                user,
                system,
                started: 5,
            })
        };
        let at = Instant::now();
        let first = Snapshot {
            at,
            tors: vec![t(100, 100), t(0, 0), t(10, 10), t(0, 0)],
            emulator: t(500, 500),
        };
        let last = Snapshot {
            at: at + Duration::from_secs(20),
            tors: vec![t(200, 100), t(300, 100), t(1010, 10)],
            emulator: t(1300, 700),
        };
        CpuReport::between(&tors, &first, &last, 100, 2)
    }

    #[test]
    fn report_over_a_period() {
        let r = report();
        assert_eq!(r.measured_seconds, 20.0);
        let figures: Vec<(&str, &str, Option<CpuUse>)> = r
            .tors
            .iter()
            .map(|t| (t.name.as_str(), t.role, t.used))
            .collect();
        let cpu = |user_s, system_s| Some(CpuUse { user_s, system_s });
        assert_eq!(
            figures,
            [
                ("auth1", "authority", cpu(1.0, 0.0)),
                ("guard", "relay", cpu(3.0, 1.0)),
                ("exit", "relay", cpu(10.0, 0.0)),
                // Missing from the last snapshot: it had exited.
                ("client", "client", None),
            ]
        );
        assert_eq!(r.emulator, cpu(8.0, 2.0));
        assert_eq!(r.cores(&r.emulator.unwrap()), 0.5);
        assert_eq!(
            r.summary(),
            "CPU over the 20 s measured: busiest relay exit 50.0% of a core (50.0% user, 0.0% \
             system); 3 tors 0.75 cores and the emulator 0.50, of the machine's 2 (no figure for \
             client)"
        );
    }

    #[test]
    fn an_empty_period_divides_by_nothing() {
        let mut r = report();
        r.measured_seconds = 0.0;
        assert_eq!(r.cores(&r.emulator.unwrap()), 0.0);
        assert!(!r.summary().contains("NaN") && !r.summary().contains("inf"));
    }
}
