//! Experiments on a Slurm cluster: each trial still to run is a task of one job array, and a
//! job that depends on the array writes the comparison once every task has ended.
//!
//! A submission writes into the experiment's output folder, under `slurm/`:
//!
//! * `submission-N.tasks`: one line per array task, `experiment<TAB>variant<TAB>trial`;
//! * `submission-N.sh`: the batch script (`sbatch` options, then one `onionlab` command that
//!   runs the task its `SLURM_ARRAY_TASK_ID` names);
//! * `submission-N.jobs`: the array's and the comparison's job ids once submitted;
//! * `submission-N-TASK.log` and `submission-N-compare.log`: what each job printed.
//!
//! The tasks run the same code as a local experiment (`run_one` on the trial's folder), so a
//! trial's files are byte-identical wherever it ran; which trials a submission takes follows
//! the experiment's resume rule (a trial whose folder holds a complete run of the same
//! scenario and seed is kept), so submitting again takes only what is missing or failed.
//! The output folder must be on a file system every node sees, and the `onionlab` binary
//! must be at the same path on every node.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Failure;

/// The folder, inside an experiment's output folder, that holds its submissions.
pub(crate) const SLURM_DIR: &str = "slurm";

/// The most tasks one submission holds: Slurm's default `MaxArraySize` is 1001 (task ids 0 to
/// 1000); an experiment has at most 64 variants of at most 1000 trials.
const MAX_TASKS: usize = 1000;

/// The flags of `experiment` and `reproduce` for running on a cluster.
#[derive(clap::Args)]
pub(crate) struct SlurmOptions {
    /// Submit the trials still to run to Slurm as one job array, and a job that writes the
    /// comparison when the array ends; prints the job ids and returns.
    #[arg(long)]
    pub slurm: bool,
    /// With --slurm: write the batch script and print what would be submitted, without
    /// submitting.
    #[arg(long, requires = "slurm")]
    pub dry_run: bool,
    /// With --slurm: the partition to submit to (`sbatch --partition`).
    #[arg(long, requires = "slurm", value_name = "P")]
    pub partition: Option<String>,
    /// With --slurm: each task's time limit, in Slurm's form (`sbatch --time`, e.g. 2:00:00).
    #[arg(long, requires = "slurm", value_name = "T")]
    pub time: Option<String>,
    /// With --slurm: each task's memory, in Slurm's form (`sbatch --mem`, e.g. 20G).
    #[arg(long, requires = "slurm", value_name = "M")]
    pub mem: Option<String>,
    /// With --slurm: cores per task (`sbatch --cpus-per-task`); also each run's threads
    /// unless --threads says otherwise.
    #[arg(long, requires = "slurm", value_name = "N")]
    pub cpus_per_task: Option<u32>,
    /// With --slurm: another `sbatch` option for the tasks and the comparison job, as one
    /// argument (repeatable), e.g. --sbatch-arg=--account=tor.
    #[arg(
        long,
        requires = "slurm",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    pub sbatch_arg: Vec<String>,
    /// Where each variant's trials stand: complete, running, pending, failed or not yet run,
    /// from the output folders and, where Slurm answers, from `squeue`.
    #[arg(long, conflicts_with = "slurm")]
    pub status: bool,
    /// Runs one task of a submission (what the batch script calls): the tasks file...
    #[arg(long, hide = true, requires = "slurm_task")]
    pub slurm_tasks: Option<PathBuf>,
    /// ... and the task's line in it.
    #[arg(long, hide = true, requires = "slurm_tasks")]
    pub slurm_task: Option<usize>,
    /// Writes the comparison of whatever trials are complete, reporting the others as failed
    /// (what the comparison job calls).
    #[arg(long, hide = true)]
    pub slurm_compare: bool,
}

impl SlurmOptions {
    /// Whether a cluster mode replaces the local run.
    pub(crate) fn any(&self) -> bool {
        self.slurm || self.status || self.slurm_task.is_some() || self.slurm_compare
    }
}

/// One trial for a task: which experiment (by name), variant (by name) and trial number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Task {
    pub experiment: String,
    pub variant: String,
    pub trial: u32,
}

impl Task {
    fn line(&self) -> String {
        format!("{}\t{}\t{}", self.experiment, self.variant, self.trial)
    }

    fn parse(line: &str) -> Option<Task> {
        let mut fields = line.split('\t');
        let task = Task {
            experiment: fields.next()?.to_string(),
            variant: fields.next()?.to_string(),
            trial: fields.next()?.parse().ok()?,
        };
        fields.next().is_none().then_some(task)
    }
}

/// Reads task `index` of a tasks file.
pub(crate) fn read_task(file: &Path, index: usize) -> Result<Task, Failure> {
    let text = fs::read_to_string(file).map_err(|e| {
        Failure::input(format!(
            "{}: cannot read the tasks file: {}",
            file.display(),
            onionlab_data::io_words(&e)
        ))
    })?;
    let line = text.lines().nth(index).ok_or_else(|| {
        Failure::input(format!(
            "{}: no task {index} (the file holds {})",
            file.display(),
            text.lines().count()
        ))
    })?;
    Task::parse(line).ok_or_else(|| {
        Failure::input(format!(
            "{}: task {index}: expected `experiment<TAB>variant<TAB>trial`, found {line:?}",
            file.display()
        ))
    })
}

/// What the commands of a submission need to know of the invocation that made it.
pub(crate) struct Invocation<'a> {
    /// `experiment FILE` or `reproduce NAME`, as the tasks must run it (absolute paths).
    pub command: Vec<String>,
    /// The output folder (absolute): the experiment's, or the reproduction's root.
    pub output: &'a Path,
    /// --trials, --stop-time and --threads as given.
    pub trials: Option<u32>,
    pub stop_time: Option<&'a str>,
    pub threads: Option<usize>,
    pub options: &'a SlurmOptions,
}

impl Invocation<'_> {
    /// The `onionlab` command line a job runs, before its own flags.
    fn base(&self, binary: &Path) -> Vec<String> {
        let mut args = vec![binary.display().to_string()];
        args.extend(self.command.iter().cloned());
        args.extend([
            "-o".into(),
            self.output.display().to_string(),
            "--quiet".into(),
        ]);
        if let Some(k) = self.trials {
            args.extend(["--trials".into(), k.to_string()]);
        }
        if let Some(t) = self.stop_time {
            args.extend(["--stop-time".into(), t.to_string()]);
        }
        match (self.threads, self.options.cpus_per_task) {
            (Some(t), _) => args.extend(["--threads".into(), t.to_string()]),
            (None, Some(c)) => args.extend(["--threads".into(), c.to_string()]),
            (None, None) => {}
        }
        args
    }

    /// `sbatch` options every job of the submission takes.
    fn sbatch_options(&self) -> Vec<String> {
        let o = self.options;
        let mut args = Vec::new();
        if let Some(p) = &o.partition {
            args.push(format!("--partition={p}"));
        }
        if let Some(t) = &o.time {
            args.push(format!("--time={t}"));
        }
        if let Some(m) = &o.mem {
            args.push(format!("--mem={m}"));
        }
        if let Some(c) = o.cpus_per_task {
            args.push(format!("--cpus-per-task={c}"));
        }
        args.extend(o.sbatch_arg.iter().cloned());
        args
    }
}

/// A word quoted for bash, whatever it holds.
fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn join(words: &[String]) -> String {
    words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
}

/// The next submission's number in `dir`: one more than the highest there.
fn next_submission(dir: &Path) -> u32 {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_prefix("submission-")?
                .strip_suffix(".tasks")?
                .parse::<u32>()
                .ok()
        })
        .max()
        .map_or(1, |n| n + 1)
}

/// The latest submission in `dir` that reached Slurm (a dry run's does not): its number and
/// tasks.
pub(crate) fn latest_submission(dir: &Path) -> Option<(u32, Vec<Task>)> {
    let n = (1..next_submission(dir))
        .rev()
        .find(|n| dir.join(format!("submission-{n}.jobs")).is_file())?;
    let text = fs::read_to_string(dir.join(format!("submission-{n}.tasks"))).ok()?;
    Some((n, text.lines().filter_map(Task::parse).collect()))
}

/// The array job's and the comparison job's ids of submission `n`, once submitted.
pub(crate) fn submission_jobs(dir: &Path, n: u32) -> Option<(String, String)> {
    let text = fs::read_to_string(dir.join(format!("submission-{n}.jobs"))).ok()?;
    let mut words = text.split_whitespace();
    Some((words.next()?.to_string(), words.next()?.to_string()))
}

/// The log of task `index` of submission `n`.
pub(crate) fn task_log(dir: &Path, n: u32, index: usize) -> PathBuf {
    dir.join(format!("submission-{n}-{index}.log"))
}

/// What a submission made, for the caller to print.
pub(crate) struct Submitted {
    pub script: PathBuf,
    pub tasks: usize,
    /// The array's and the comparison's job ids (none for a dry run).
    pub jobs: Option<(Option<String>, String)>,
}

/// Checks that Slurm's `sbatch` is there and the binary can be named to the nodes.
pub(crate) fn check_cluster(dry_run: bool) -> Result<PathBuf, Failure> {
    let binary = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| {
            Failure::input(format!(
                "--slurm: cannot tell where this onionlab binary is, which the tasks must run: \
                 {}",
                onionlab_data::io_words(&e)
            ))
        })?;
    if !dry_run && !on_path("sbatch") {
        return Err(Failure::input(
            "--slurm: no `sbatch` on PATH: this machine is not a Slurm submit host (run it \
             where `sbatch` works, or add --dry-run to only write the batch script)",
        ));
    }
    Ok(binary)
}

/// Whether `program` is an executable file in a folder of `PATH`.
pub(crate) fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            fs::metadata(dir.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Writes the tasks file and the batch script of a new submission in `dir`, and submits them
/// (unless `--dry-run`): the array over `tasks` (none when every trial is complete), running
/// `inv`'s command, then the comparison job after it, running `compare`'s.
pub(crate) fn submit(
    inv: &Invocation,
    compare: &Invocation,
    dir: &Path,
    tasks: &[Task],
    binary: &Path,
    job_name: &str,
) -> Result<Submitted, Failure> {
    if tasks.len() > MAX_TASKS {
        return Err(Failure::input(format!(
            "--slurm: {} trials to run, more than the {MAX_TASKS} tasks of one job array \
             (Slurm's default MaxArraySize); run fewer variants or trials per experiment",
            tasks.len()
        )));
    }
    let write = |path: &Path, text: &str| {
        fs::write(path, text).map_err(|e| {
            Failure::input(format!(
                "{}: cannot write: {}",
                path.display(),
                onionlab_data::io_words(&e)
            ))
        })
    };
    fs::create_dir_all(dir).map_err(|e| {
        Failure::input(format!(
            "{}: cannot create: {}",
            dir.display(),
            onionlab_data::io_words(&e)
        ))
    })?;
    let n = next_submission(dir);
    let tasks_file = dir.join(format!("submission-{n}.tasks"));
    let mut lines: String = tasks.iter().map(|t| t.line() + "\n").collect();
    if lines.is_empty() {
        lines.push('\n');
    }
    write(&tasks_file, &lines)?;

    let sbatch = inv.sbatch_options();
    let mut task_cmd = inv.base(binary);
    task_cmd.extend(["--slurm-tasks".into(), tasks_file.display().to_string()]);
    let mut script = String::from("#!/bin/bash\n");
    script.push_str(&format!(
        "# onionlab: {} task{} of {}, written by `{}`\n",
        tasks.len(),
        if tasks.len() == 1 { "" } else { "s" },
        job_name,
        join(&inv.command)
    ));
    script.push_str(&format!("#SBATCH --job-name={}\n", quote(job_name)));
    if !tasks.is_empty() {
        script.push_str(&format!("#SBATCH --array=0-{}\n", tasks.len() - 1));
    }
    script.push_str(&format!(
        "#SBATCH --output={}\n",
        quote(
            &dir.join(format!("submission-{n}-%a.log"))
                .display()
                .to_string()
        )
    ));
    for o in &sbatch {
        script.push_str(&format!("#SBATCH {}\n", quote(o)));
    }
    script.push_str(&format!(
        "exec {} --slurm-task \"$SLURM_ARRAY_TASK_ID\"\n",
        join(&task_cmd)
    ));
    let script_file = dir.join(format!("submission-{n}.sh"));
    write(&script_file, &script)?;

    let mut compare_cmd = compare.base(binary);
    compare_cmd.push("--slurm-compare".into());
    let compare_log = dir.join(format!("submission-{n}-compare.log"));
    let compare_args = |after: Option<&str>| {
        let mut args = vec![
            "--parsable".to_string(),
            format!("--job-name={job_name}-compare"),
            format!("--output={}", compare_log.display()),
        ];
        // What the tasks ask for (time, memory, partition) fits the comparison too, which
        // reads every trial's files.
        args.extend(sbatch.iter().cloned());
        if let Some(id) = after {
            args.push(format!("--dependency=afterany:{id}"));
        }
        args.push(format!("--wrap=exec {}", join(&compare_cmd)));
        args
    };
    if inv.options.dry_run {
        if !tasks.is_empty() {
            println!("would run: sbatch --parsable {}", script_file.display());
        }
        let after = (!tasks.is_empty()).then_some("ARRAY_JOB_ID");
        println!("would run: sbatch {}", join(&compare_args(after)));
        return Ok(Submitted {
            script: script_file,
            tasks: tasks.len(),
            jobs: None,
        });
    }
    let array = if tasks.is_empty() {
        None
    } else {
        Some(sbatch_run(&[
            "--parsable".to_string(),
            script_file.display().to_string(),
        ])?)
    };
    let compare = sbatch_run(&compare_args(array.as_deref()))?;
    write(
        &dir.join(format!("submission-{n}.jobs")),
        &format!("{} {compare}\n", array.as_deref().unwrap_or("-")),
    )?;
    Ok(Submitted {
        script: script_file,
        tasks: tasks.len(),
        jobs: Some((array, compare)),
    })
}

/// Runs `sbatch ARGS` and returns the job id it prints (`--parsable`: `id` or `id;cluster`).
fn sbatch_run(args: &[String]) -> Result<String, Failure> {
    let out = Command::new("sbatch").args(args).output().map_err(|e| {
        Failure::input(format!(
            "--slurm: cannot run sbatch: {}",
            onionlab_data::io_words(&e)
        ))
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id = stdout.trim().split(';').next().unwrap_or("").to_string();
    if !out.status.success() || id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Failure::input(format!(
            "--slurm: sbatch refused the job: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(id)
}

/// Where Slurm has each task of an array job: task index → state (`PENDING`, `RUNNING`, …),
/// for the tasks still in its queue; `None` when `squeue` cannot be asked.
pub(crate) fn queued(array_job: &str) -> Option<Vec<(usize, String)>> {
    if !on_path("squeue") {
        return None;
    }
    let out = Command::new("squeue")
        .args(["-h", "-r", "-j", array_job, "-o", "%K %T"])
        .output()
        .ok()?;
    if !out.status.success() {
        // A job that has left the queue is unknown to squeue: nothing of it is queued.
        return Some(Vec::new());
    }
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let (task, state) = l.trim().split_once(' ')?;
                Some((task.parse().ok()?, state.to_string()))
            })
            .collect(),
    )
}

/// The last `n` lines of a file, or nothing where it cannot be read.
pub(crate) fn tail(path: &Path, n: usize) -> Vec<String> {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_read_back() {
        let t = Task {
            experiment: "imux".into(),
            variant: "vanilla".into(),
            trial: 3,
        };
        assert_eq!(Task::parse(&t.line()), Some(t));
        assert_eq!(Task::parse("a\tb"), None);
        assert_eq!(Task::parse("a\tb\tx"), None);
        assert_eq!(Task::parse("a\tb\t1\tc"), None);
    }

    #[test]
    fn words_are_quoted_for_bash() {
        assert_eq!(quote("/a/b-c.yaml"), "/a/b-c.yaml");
        assert_eq!(quote("two words"), "'two words'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("$HOME"), "'$HOME'");
    }
}
