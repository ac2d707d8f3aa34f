// Nothing to build: see Cargo.toml.
