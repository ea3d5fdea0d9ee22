//! Sans-IO TCP (being written).
