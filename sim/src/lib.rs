//! airlock-sim supplies a world and decides nothing: it will drive core's unchanged worker over
//! simulated ports and check every invariant marked S in SPEC §16 after each seed.
