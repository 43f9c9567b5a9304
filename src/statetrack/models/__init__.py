"""Models: the sequence-model stack around a registered mixer (`model`), the registry of named models
(`zoo`) and parameter-matched widths (`sizing`)."""
