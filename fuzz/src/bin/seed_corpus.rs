//! Writes the seed corpus of every target (`strata::lab::fuzz::seeds`) to `corpus/<target>/seed-<n>`.

fn main() -> std::io::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut counts = std::collections::BTreeMap::new();
    for (target, bytes) in strata::lab::fuzz::seeds() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        let n = counts.entry(target).or_insert(0usize);
        std::fs::write(dir.join(format!("seed-{n}")), bytes)?;
        *n += 1;
    }
    for (target, n) in counts {
        println!("{target}: {n} seeds");
    }
    Ok(())
}
