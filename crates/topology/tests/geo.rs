//! The geographic Internet model (`internet-geo`): internet-2018's nodes, with every latency
//! the distance rule of `scripts/geo-graph.py` applied to `data/topology/country-points.csv`.
//! Checked here independently of the script, so an edit to either the file or the rule that
//! the book states shows up.

use std::collections::HashMap;
use std::path::PathBuf;

use onionlab_topology::Graph;

const MS: f64 = 1e6;

fn data(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/topology")
        .join(path)
}

/// Country code → ((latitude, longitude) in degrees, area in km²).
fn points() -> HashMap<String, ((f64, f64), f64)> {
    let text = std::fs::read_to_string(data("country-points.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("code,lat,lon,area_km2,point,point_from"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.splitn(5, ',').collect();
            let num = |i: usize| f[i].parse::<f64>().unwrap();
            (f[0].to_string(), ((num(1), num(2)), num(3)))
        })
        .collect()
}

/// One-way latency in ms over `km` of line-of-sight distance: 2.1 times the distance at the
/// speed of light in fibre (2/3 c).
fn rule_ms(km: f64) -> f64 {
    2.1 * km / (299_792.458 * 2.0 / 3.0 / 1000.0)
}

fn great_circle_km((lat1, lon1): (f64, f64), (lat2, lon2): (f64, f64)) -> f64 {
    let (p1, p2) = (lat1.to_radians(), lat2.to_radians());
    let h = ((p2 - p1) / 2.0).sin().powi(2)
        + p1.cos() * p2.cos() * ((lon2 - lon1).to_radians() / 2.0).sin().powi(2);
    2.0 * 6371.0088 * h.sqrt().min(1.0).asin()
}

fn load() -> Graph {
    Graph::load(&data("internet-geo-183-nodes.graphml.xml.xz")).unwrap()
}

#[test]
fn same_nodes_and_access_links_as_internet_2018() {
    let geo = load();
    let old = Graph::load(&data("internet-2018-183-nodes.graphml.xml.xz")).unwrap();
    assert_eq!(geo.nodes.len(), 183);
    assert_eq!(geo.edges.len(), 183 * 184 / 2);
    for (a, b) in geo.nodes.iter().zip(&old.nodes) {
        assert_eq!(
            (a.id, &a.country_code, a.bandwidth_up, a.bandwidth_down),
            (b.id, &b.country_code, b.bandwidth_up, b.bandwidth_down)
        );
    }
    assert!(geo
        .edges
        .iter()
        .all(|e| e.jitter == 0 && e.packet_loss == 0.0));
    assert!(geo.nodes.iter().all(|n| n.packet_loss == 0.0));
}

#[test]
fn every_latency_follows_the_distance_rule() {
    let g = load();
    let at = points();
    let country = |i: usize| g.nodes[i].country_code.clone().unwrap();
    for e in &g.edges {
        let (a, b) = (&at[&country(e.source)], &at[&country(e.target)]);
        let km = if e.source == e.target {
            // Mean distance between two points of a disc of the country's area.
            128.0 / (45.0 * std::f64::consts::PI) * (a.1 / std::f64::consts::PI).sqrt()
        } else {
            great_circle_km(a.0, b.0)
        };
        let want = rule_ms(km);
        // The file rounds to the microsecond.
        assert!(
            (e.latency as f64 / MS - want).abs() <= 0.0006,
            "{}-{}: {} ms in the file, {want:.4} ms by the rule",
            country(e.source),
            country(e.target),
            e.latency as f64 / MS
        );
    }
}

#[test]
fn shortest_paths_are_the_direct_edges() {
    // Great-circle distances obey the triangle inequality, so no path through a third
    // country is shorter than the direct edge: what the graph says between two countries is
    // what hosts there see. Only the file's rounding to the microsecond lets a path through
    // a country on the way come out a microsecond or two shorter.
    let g = load();
    let used: Vec<usize> = (0..g.nodes.len()).collect();
    let t = g.paths(&used).unwrap();
    let mut direct = HashMap::new();
    for e in &g.edges {
        direct.insert((e.source, e.target), e.latency);
        direct.insert((e.target, e.source), e.latency);
    }
    for a in 0..g.nodes.len() {
        for b in 0..g.nodes.len() {
            let (path, edge) = (t.path(a, b).latency, direct[&(a, b)]);
            assert!(
                path <= edge && edge - path <= 2_000,
                "{a}-{b}: {path} ns, edge {edge} ns"
            );
        }
    }
    // Where the 2019 relays and OnionPerf sites were: Europe's capitals a few milliseconds
    // apart, an ocean tens of milliseconds.
    let node = |cc: &str| {
        (g.nodes.iter())
            .position(|n| n.country_code.as_deref() == Some(cc))
            .unwrap()
    };
    let ms = |a: &str, b: &str| t.path(node(a), node(b)).latency as f64 / MS;
    assert!((5.0..7.0).contains(&ms("DE", "NL")), "{}", ms("DE", "NL"));
    assert!((60.0..80.0).contains(&ms("US", "DE")), "{}", ms("US", "DE"));
    assert!(
        (90.0..100.0).contains(&ms("HK", "NL")),
        "{}",
        ms("HK", "NL")
    );
}
