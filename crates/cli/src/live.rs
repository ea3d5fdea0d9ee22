//! `onionlab reproduce live-network`: networks generated from the 2019 consensus, each run as
//! an independently sampled network, set against what Tor Metrics measured on the live Tor
//! network in 2019 (`data/live/tor-metrics-2019.json`).
//!
//! The steps are the commands a user would run by hand: `generate` writes
//! `<out>/network.yaml` (the period's Tor parameters, the geographic graph,
//! OnionPerf-like clients where OnionPerf measured from); an experiment (`<out>/live-network.yaml`)
//! runs it as generated and with four of those choices undone, each as K sampled networks, into
//! `<out>/<variant>/` (so a second run keeps the networks already complete); and the comparison
//! (`onionlab_report::write_live_page`) writes `<out>/index.html` and `<out>/live.csv`.

use std::fs;
use std::path::PathBuf;

use onionlab_report::{LiveData, RunData};

use crate::experiment::{ExperimentArgs, ReproduceArgs};
use crate::generate::{scenario_for, GenerateArgs};
use crate::Failure;

/// The reproduction's name for `reproduce`.
pub(crate) const NAME: &str = "live-network";

/// One line for `reproduce --list`.
pub(crate) const ABOUT: &str = "networks generated from the 2019 consensus \
    (consensus-2019-microdesc) at --scale (default 0.1) and the live load, as generated, on \
    internet-2018's latencies instead of geographic ones, with Vegas instead of the period's \
    SENDME windows, with relays placed at random instead of by address, and with relays held \
    to their rates by tor's token buckets instead of their links, 3 sampled \
    networks of 8 simulated minutes each, against Tor Metrics' 2019 OnionPerf measurements: \
    time to last byte per size, circuit build times, round trips, throughput and errors as \
    means over networks with 95% intervals; index.html draws the distributions beside the \
    live ones";

const CONSENSUS: &str = "consensus-2019-microdesc";
const LIVE_FILE: &str = "live/tor-metrics-2019.json";
const DEFAULT_SCALE: f64 = 0.1;
const NETWORK_FILE: &str = "network.yaml";
const EXPERIMENT_FILE: &str = "live-network.yaml";

/// The experiment: the generated network and four of its choices undone, one at a
/// time, so the page shows what each is worth.
const VARIANTS: [(&str, &str); 5] = [
    ("as-generated", ""),
    (
        "internet-2018",
        "network.graph: internet-2018, network.graph_loss: false",
    ),
    ("vegas", "tor.flow_control: vegas"),
    (
        "random-placement",
        "relays.sample.place: random, relays.sample.geoip: null",
    ),
    ("token-bucket", "relays.sample.limit: bucket"),
];

/// The variants `--variants` names (all of them without it), in the order of [`VARIANTS`].
fn chosen_variants(names: Option<&[String]>) -> Result<Vec<(&'static str, &'static str)>, Failure> {
    let Some(names) = names else {
        return Ok(VARIANTS.to_vec());
    };
    let known: Vec<&str> = VARIANTS.iter().map(|(n, _)| *n).collect();
    if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
        return Err(Failure::input(format!(
            "--variants: no variant {bad:?}; expected one or more of {}, comma-separated",
            known.join(", ")
        )));
    }
    Ok(VARIANTS
        .iter()
        .copied()
        .filter(|(n, _)| names.iter().any(|x| x == n))
        .collect())
}

fn experiment_text(variants: &[(&str, &str)]) -> String {
    let mut t = String::from(
        "# Written by onionlab reproduce live-network: the generated network as generated, and\n\
         # with one of generate's period choices undone per variant.\n\
         name: live-network\n\
         scenario: network.yaml\n\
         trials: 3\n\
         stop_time: 8m\n\
         variants:\n",
    );
    for &(name, set) in variants {
        if set.is_empty() {
            t.push_str(&format!("  - name: {name}\n"));
        } else {
            t.push_str(&format!("  - {{ name: {name}, set: {{ {set} }} }}\n"));
        }
    }
    t
}

/// The shipped live measurements.
pub(crate) fn live_data() -> Result<LiveData, Failure> {
    let file = onionlab_data::embedded(LIVE_FILE)
        .ok_or_else(|| Failure::internal(format!("data/{LIVE_FILE} is not compiled in")))?;
    let text = std::str::from_utf8(file.bytes)
        .map_err(|e| Failure::internal(format!("data/{LIVE_FILE}: {e}")))?;
    LiveData::parse(text, &format!("data/{LIVE_FILE}")).map_err(Failure::internal)
}

pub(crate) fn reproduce(args: ReproduceArgs) -> Result<(), Failure> {
    let live = live_data()?;
    let scale = args.scale.unwrap_or(DEFAULT_SCALE);
    let chosen = chosen_variants(args.variants.as_deref())?;
    let text = scenario_for(&GenerateArgs {
        consensus: CONSENSUS.into(),
        scale,
        load: 1.0,
        output: None,
        seed: 1,
        // The experiment's stop_time (or --stop-time) is what runs; this only has to be valid.
        stop_time: "8m".into(),
        force: false,
    })?;
    let root = (args.output.clone())
        .unwrap_or_else(|| PathBuf::from("out").join(format!("reproduce-{NAME}")));
    fs::create_dir_all(&root)
        .map_err(|e| Failure::input(format!("{}: cannot create it: {e}", root.display())))?;
    for (file, contents) in [
        (NETWORK_FILE, text),
        (EXPERIMENT_FILE, experiment_text(&chosen)),
    ] {
        let path = root.join(file);
        fs::write(&path, contents)
            .map_err(|e| Failure::input(format!("{}: cannot write: {e}", path.display())))?;
    }
    println!(
        "reproduce {NAME}: {} (consensus {CONSENSUS} at scale {scale})",
        root.join(NETWORK_FILE).display()
    );
    let check = args.options.check;
    // On a cluster the tasks run the experiment file written above; the comparison job runs
    // this command again, so that it writes the page below once the trials are done.
    let cluster = args.options.cluster.any() && !args.options.cluster.slurm_compare;
    let mut compare_command = vec![
        "reproduce".to_string(),
        NAME.to_string(),
        "--scale".to_string(),
        scale.to_string(),
    ];
    if let Some(v) = &args.variants {
        compare_command.extend(["--variants".to_string(), v.join(",")]);
    }
    crate::experiment::experiment(ExperimentArgs {
        file: root.join(EXPERIMENT_FILE),
        output: Some(root.clone()),
        options: args.options,
        compare_command: Some(compare_command),
    })?;
    if check || cluster {
        return Ok(());
    }
    let mut variants: Vec<(String, Vec<RunData>)> = Vec::new();
    for &(name, _) in &chosen {
        let input = onionlab_report::load_input(&root.join(name))
            .map_err(|e| Failure::internal(e.to_string()))?;
        variants.push((name.to_string(), input.runs().to_vec()));
    }
    let about = format!(
        "Networks sampled from {CONSENSUS} at scale {scale} and the live load ({NETWORK_FILE}; \
         the variants in {EXPERIMENT_FILE}, their runs in the folders of the same names), \
         against Tor Metrics' measurements of the live network from {} to {} \
         (data/{LIVE_FILE}). A statistic is taken per network from its OnionPerf-like clients \
         after the bootstrap period and shown as the mean over networks with its 95% \
         Student-t interval, and its difference from the live value.",
        live.period.from, live.period.to
    );
    let page = onionlab_report::write_live_page(
        &root,
        &format!("onionlab reproduce {NAME}"),
        &about,
        &variants,
        &live,
    )
    .map_err(|e| Failure::internal(e.to_string()))?;
    for (name, runs) in &variants {
        println!("{name}:");
        let networks: Vec<_> = runs
            .iter()
            .map(onionlab_report::NetworkSample::of)
            .collect();
        for row in onionlab_report::live_compare(&networks, &live) {
            println!(
                "  {:<42} {:>9.3} ± {:<9} live {:>7.3}  {:>+5.0}%",
                row.statistic,
                row.model.mean,
                (row.model.half_width)
                    .map(|h| format!("{h:.3}"))
                    .unwrap_or_else(|| "-".into()),
                row.live,
                row.difference_pct()
            );
        }
    }
    println!("reproduce {NAME}: {}", page.display());
    Ok(())
}
