//! The machine measured and the date, in words for the file's header: a calibration is only
//! worth as much as one can tell which machine it describes and how old it is.

use std::time::{SystemTime, UNIX_EPOCH};

/// The CPU's model name as /proc/cpuinfo gives it (x86's `model name`; some ARM kernels only
/// give `Hardware` or nothing).
fn cpu_model() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| matches!(k.trim(), "model name" | "Hardware" | "Processor"))
        .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| format!("unknown {} CPU", std::env::consts::ARCH))
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| format!("Linux {}", s.trim()))
        .unwrap_or_else(|_| std::env::consts::OS.to_string())
}

/// Whether the CPU has AES instructions: without them every AES cost is several times
/// higher, and native counter mode gains far less over the hand-built one.
pub(crate) fn has_aes_ni() -> Option<bool> {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        Some(std::arch::is_x86_feature_detected!("aes"))
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        None
    }
}

/// "CPU model, N cores, kernel, AES-NI yes/no".
pub(crate) fn describe() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let aes = match has_aes_ni() {
        Some(true) => "AES-NI yes",
        Some(false) => "AES-NI no",
        None => "AES-NI n/a (not x86)",
    };
    format!("{}, {cores} cores, {}, {aes}", cpu_model(), kernel())
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// The calendar date `days` after 1970-01-01, as YYYY-MM-DD. Walking whole years and then
/// months is slow by a calendar library's standards (fifty-odd steps) and plainly right.
pub(crate) fn date_from_days(mut days: u64) -> String {
    let mut year = 1970i64;
    loop {
        let len = if is_leap(year) { 366 } else { 365 };
        if days < len {
            break;
        }
        days -= len;
        year += 1;
    }
    let feb = if is_leap(year) { 29 } else { 28 };
    let months = [31, feb, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let mut month = 0;
    while days >= months[month] {
        days -= months[month];
        month += 1;
    }
    format!("{year:04}-{:02}-{:02}", month + 1, days + 1)
}

/// Today's date in UTC.
pub(crate) fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    date_from_days(secs / 86_400)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_across_leap_years() {
        assert_eq!(date_from_days(0), "1970-01-01");
        assert_eq!(date_from_days(31), "1970-02-01");
        assert_eq!(date_from_days(10_957), "2000-01-01");
        assert_eq!(date_from_days(11_016), "2000-02-29");
        assert_eq!(date_from_days(11_017), "2000-03-01");
        assert_eq!(date_from_days(19_782), "2024-02-29");
        assert_eq!(date_from_days(20_088), "2024-12-31");
        assert_eq!(date_from_days(20_089), "2025-01-01");
    }

    #[test]
    fn machine_says_cores_and_aes() {
        let m = describe();
        assert!(m.contains(" cores, "), "{m}");
        assert!(m.contains("AES-NI"), "{m}");
    }
}
