//! The files of the repository's `data/` folder, compiled in (see `table_matches_the_data_folder`).

use crate::DataFile;

/// Every shipped file, by its path under `data/`.
pub static FILES: &[DataFile] = &[
    DataFile {
        path: "consensus/2019-12-15-13-00-00-microdesc-consensus.xz",
        bytes: include_bytes!("../../../data/consensus/2019-12-15-13-00-00-microdesc-consensus.xz"),
    },
    DataFile {
        path: "consensus/2022-11-19-10-00-00-consensus.xz",
        bytes: include_bytes!("../../../data/consensus/2022-11-19-10-00-00-consensus.xz"),
    },
    DataFile {
        path: "consensus/2023-06-01-10-00-00-consensus.xz",
        bytes: include_bytes!("../../../data/consensus/2023-06-01-10-00-00-consensus.xz"),
    },
    DataFile {
        path: "cpu/calibration-epyc-2core-2026-11.yaml",
        bytes: include_bytes!("../../../data/cpu/calibration-epyc-2core-2026-11.yaml"),
    },
    DataFile {
        path: "geoip/geoip-2021-03-12.xz",
        bytes: include_bytes!("../../../data/geoip/geoip-2021-03-12.xz"),
    },
    DataFile {
        path: "geoip/geoip-2022-12-06.xz",
        bytes: include_bytes!("../../../data/geoip/geoip-2022-12-06.xz"),
    },
    DataFile {
        path: "geoip/geoip-2023-06-01.xz",
        bytes: include_bytes!("../../../data/geoip/geoip-2023-06-01.xz"),
    },
    DataFile {
        path: "live/tor-metrics-2019.json",
        bytes: include_bytes!("../../../data/live/tor-metrics-2019.json"),
    },
    DataFile {
        path: "relays/relays-2018-1998.csv",
        bytes: include_bytes!("../../../data/relays/relays-2018-1998.csv"),
    },
    DataFile {
        path: "topology/internet-2018-183-nodes.graphml.xml.xz",
        bytes: include_bytes!("../../../data/topology/internet-2018-183-nodes.graphml.xml.xz"),
    },
    DataFile {
        path: "topology/country-points.csv",
        bytes: include_bytes!("../../../data/topology/country-points.csv"),
    },
    DataFile {
        path: "topology/internet-geo-183-nodes.graphml.xml.xz",
        bytes: include_bytes!("../../../data/topology/internet-geo-183-nodes.graphml.xml.xz"),
    },
    DataFile {
        path: "topology/transatlantic-2-sites.gml",
        bytes: include_bytes!("../../../data/topology/transatlantic-2-sites.gml"),
    },
    DataFile {
        path: "workload/client-speed-by-country-2020-04.json.xz",
        bytes: include_bytes!("../../../data/workload/client-speed-by-country-2020-04.json.xz"),
    },
    DataFile {
        path: "workload/privcount-2018-packet-model-best-fit.json",
        bytes: include_bytes!("../../../data/workload/privcount-2018-packet-model-best-fit.json"),
    },
    DataFile {
        path: "workload/privcount-2018-packet-model-best.json",
        bytes: include_bytes!("../../../data/workload/privcount-2018-packet-model-best.json"),
    },
    DataFile {
        path: "workload/privcount-2018-packet-model-initial.json",
        bytes: include_bytes!("../../../data/workload/privcount-2018-packet-model-initial.json"),
    },
    DataFile {
        path: "workload/privcount-2018-stream-model-best-fit.json",
        bytes: include_bytes!("../../../data/workload/privcount-2018-stream-model-best-fit.json"),
    },
    DataFile {
        path: "workload/privcount-2018-stream-model-best.json",
        bytes: include_bytes!("../../../data/workload/privcount-2018-stream-model-best.json"),
    },
    DataFile {
        path: "workload/privcount-2018-stream-model-initial.json",
        bytes: include_bytes!("../../../data/workload/privcount-2018-stream-model-initial.json"),
    },
    DataFile {
        path: "workload/tgen-http-model.graphml.xml.xz",
        bytes: include_bytes!("../../../data/workload/tgen-http-model.graphml.xml.xz"),
    },
];
