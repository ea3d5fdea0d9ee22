//! Network graphs (being written).
