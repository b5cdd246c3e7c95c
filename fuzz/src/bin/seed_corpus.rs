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
    // The server's request parser: a few real request streams.
    let requests: [&[u8]; 4] = [
        b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n",
        b"PING\r\nSET a \"b c\"\r\nQUIT\r\n",
        b"*4\r\n$6\r\nSAMPLE\r\n$1\r\n-\r\n$1\r\n+\r\n$2\r\n10\r\n*0\r\n*-1\r\n",
        b"*1\r\n$0\r\n\r\n\r\n\n",
    ];
    let dir = root.join("resp_request");
    std::fs::create_dir_all(&dir)?;
    for (n, r) in requests.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{n}")), r)?;
    }
    counts.insert("resp_request", requests.len());
    for (target, n) in counts {
        println!("{target}: {n} seeds");
    }
    Ok(())
}
