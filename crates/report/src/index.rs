//! `index.html`: one page over several experiments' comparisons.
//!
//! A reproduction runs several experiments, each with its own `compare.html`; the result a
//! paper states ("QUIC against TCP on the toy network, and goodput against loss") spans them.
//! The index shows each experiment's key figures together and links every comparison, so one
//! page answers the question and the details stay one click away.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use crate::output::{OutputDir, ReportError};
use crate::plot::{HEIGHT, WIDTH};
use crate::report::{html_escape, page_start, COMPARE_HTML};

/// The page a reproduction writes beside its experiments' folders.
pub const INDEX_HTML: &str = "index.html";

/// One experiment on the index page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// The experiment's name.
    pub name: String,
    /// Where it comes from (its experiment file), shown under its name.
    pub about: String,
    /// Its comparison folder, relative to the index's folder, with `/` separators (e.g.
    /// `quux-toy/compare`).
    pub compare: String,
}

/// Figures that stand for an experiment on the index: its sweep plots when it has any (the
/// experiment's question is the sweep), else its download-time comparisons (time to last byte
/// per size, per-client median time to last byte per group) and, for runs with a CPU model,
/// relay goodput and the busiest relays' CPU split, in file-name order.
pub fn key_figures(compare_dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(compare_dir) else {
        return Vec::new();
    };
    let mut svgs: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    svgs.sort();
    let sweeps: Vec<String> = svgs
        .iter()
        .filter(|n| n.starts_with("sweep_"))
        .cloned()
        .collect();
    if !sweeps.is_empty() {
        return sweeps;
    }
    // An experiment on relay CPU asks how throughput and the CPU split move between variants.
    let cpu = svgs.iter().any(|n| n == "compare_relay_cpu.svg");
    svgs.into_iter()
        .filter(|n| {
            n.starts_with("compare_ttlb_cdf_")
                || n.starts_with("compare_client_median_ttlb_cdf_")
                || (cpu && (n == "compare_relay_goodput.svg" || n == "compare_relay_cpu.svg"))
        })
        .collect()
}

/// Writes `out/index.html`: a section per experiment with a link to its `compare.html` and its
/// [`key_figures`] (SVG, linking the PNG); an experiment whose comparison is not there yet says
/// so. Returns the page's path.
pub fn write_index(
    out: &Path,
    title: &str,
    about: &str,
    entries: &[IndexEntry],
) -> Result<PathBuf, ReportError> {
    let dir = OutputDir::create(out)?;
    let mut html = page_start(title);
    let _ = writeln!(html, "<p>{}</p>", html_escape(about));
    if entries.len() > 1 {
        html.push_str("<ul>\n");
        for e in entries {
            let _ = writeln!(
                html,
                "<li><a href=\"#{id}\">{name}</a></li>",
                id = html_escape(&e.name),
                name = html_escape(&e.name)
            );
        }
        html.push_str("</ul>\n");
    }
    for e in entries {
        let _ = writeln!(
            html,
            "<h2 id=\"{id}\">{name}</h2>\n<p class=\"note\">{about}</p>",
            id = html_escape(&e.name),
            name = html_escape(&e.name),
            about = html_escape(&e.about)
        );
        let compare_dir = out.join(&e.compare);
        if !compare_dir.join(COMPARE_HTML).is_file() {
            html.push_str(
                "<p class=\"partial\">Not compared yet: the experiment has not finished.</p>\n",
            );
            continue;
        }
        let _ = writeln!(
            html,
            "<p>Full comparison (every plot and table): <a href=\"{href}\">{href}</a>.</p>",
            href = html_escape(&format!("{}/{COMPARE_HTML}", e.compare))
        );
        for svg in key_figures(&compare_dir) {
            let stem = svg.trim_end_matches(".svg");
            let src = format!("{}/{svg}", e.compare);
            let png = format!("{}/{stem}.png", e.compare);
            let _ = write!(
                html,
                "<figure>\n<img src=\"{src}\" alt=\"{stem}\" width=\"{WIDTH}\" \
                 height=\"{HEIGHT}\">\n<figcaption>{stem}: <a href=\"{src}\">SVG</a>, \
                 <a href=\"{png}\">PNG</a></figcaption>\n</figure>\n",
                src = html_escape(&src),
                png = html_escape(&png),
                stem = html_escape(stem),
            );
        }
    }
    html.push_str("</body>\n</html>\n");
    dir.write_bytes(INDEX_HTML, html.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tmp(PathBuf);
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn touch(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "x").unwrap();
    }

    /// The page links each experiment's comparison and shows its key figures: the sweep plot
    /// of a sweep experiment, the download-time figures of another; an experiment not run yet
    /// is named as such.
    /// A CPU experiment's key figures add relay goodput and the CPU split by variant.
    #[test]
    fn cpu_experiments_show_goodput_and_the_cpu_split() {
        let tmp =
            Tmp(std::env::temp_dir().join(format!("onionlab-index-cpu-{}", std::process::id())));
        let dir = tmp.0.join("compare");
        let common = [
            "compare_ttfb_cdf.svg",
            "compare_ttlb_cdf_100MiB.svg",
            "compare_relay_goodput.svg",
        ];
        for f in common {
            touch(&dir.join(f));
        }
        assert_eq!(key_figures(&dir), ["compare_ttlb_cdf_100MiB.svg"]);
        touch(&dir.join("compare_relay_cpu.svg"));
        assert_eq!(
            key_figures(&dir),
            [
                "compare_relay_cpu.svg",
                "compare_relay_goodput.svg",
                "compare_ttlb_cdf_100MiB.svg"
            ]
        );
    }

    #[test]
    fn the_index_links_every_comparison_and_embeds_its_key_figures() {
        let tmp = Tmp(std::env::temp_dir().join(format!("onionlab-index-{}", std::process::id())));
        let out = &tmp.0;
        let toy = out.join("quux-toy/compare");
        for f in [
            COMPARE_HTML,
            "compare_ttfb_cdf.svg",
            "compare_ttlb_cdf_320KiB.svg",
            "compare_ttlb_cdf_320KiB.png",
            "compare_client_median_ttlb_cdf_web.svg",
            "compare_relay_goodput.svg",
        ] {
            touch(&toy.join(f));
        }
        let loss = out.join("quux-loss/compare");
        for f in [
            COMPARE_HTML,
            "sweep_slowest_upload_goodput.svg",
            "compare_ttlb_cdf_32MiB.svg",
        ] {
            touch(&loss.join(f));
        }
        let entries = [
            IndexEntry {
                name: "quux-toy".into(),
                about: "examples/experiments/quux-toy.yaml".into(),
                compare: "quux-toy/compare".into(),
            },
            IndexEntry {
                name: "quux-loss".into(),
                about: "examples/experiments/quux-loss.yaml".into(),
                compare: "quux-loss/compare".into(),
            },
            IndexEntry {
                name: "later".into(),
                about: "examples/experiments/later.yaml".into(),
                compare: "later/compare".into(),
            },
        ];
        let page = write_index(out, "onionlab reproduce quux", "QUIC", &entries).unwrap();
        assert_eq!(page, out.join(INDEX_HTML));
        let html = fs::read_to_string(&page).unwrap();
        for needle in [
            "href=\"quux-toy/compare/compare.html\"",
            "src=\"quux-toy/compare/compare_ttlb_cdf_320KiB.svg\"",
            "src=\"quux-toy/compare/compare_client_median_ttlb_cdf_web.svg\"",
            "href=\"quux-loss/compare/compare.html\"",
            "src=\"quux-loss/compare/sweep_slowest_upload_goodput.svg\"",
            "Not compared yet",
        ] {
            assert!(html.contains(needle), "{needle} missing from:\n{html}");
        }
        // Only the key figures: not every plot of the comparison.
        for absent in [
            "compare_ttfb_cdf.svg",
            "compare_relay_goodput.svg",
            "compare_ttlb_cdf_32MiB.svg",
        ] {
            assert!(!html.contains(absent), "{absent} is not a key figure");
        }
        // Every local reference of the page exists, except the PNGs this test did not write.
        for part in html.split("src=\"").skip(1) {
            let target = &part[..part.find('"').unwrap()];
            assert!(out.join(target).is_file(), "{target} does not exist");
        }
    }
}
