//! CPU time a server spent, read from `/proc`: a steadier measure of what an answer costs than
//! queries per second, which the load generator sharing the cores moves by several per cent
//! from one run to the next.

use std::collections::HashMap;

/// Whose CPU time counts for one server.
#[derive(Debug, Clone, Copy)]
pub enum CpuOf {
    /// The threads of this process whose name starts so (Meridian's UDP threads, in the
    /// bench's own process; only the server under load is busy, the other's threads sleep).
    OwnThreads(&'static str),
    /// A process and every process below it (NSD answers from children it forks).
    ProcessTree(u32),
}

/// Clock ticks (user and system) spent so far, as `/proc` counts them.
pub fn ticks(of: CpuOf) -> u64 {
    match of {
        CpuOf::OwnThreads(prefix) => std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
            .filter_map(|stat| parse_stat(&stat))
            .filter(|stat| stat.name.starts_with(prefix))
            .map(|stat| stat.ticks)
            .sum(),
        CpuOf::ProcessTree(root) => {
            let processes: HashMap<u32, Stat> = std::fs::read_dir("/proc")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|pid| {
                    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                    Some((pid, parse_stat(&stat)?))
                })
                .collect();
            let in_tree = |mut pid: u32| loop {
                if pid == root {
                    return true;
                }
                match processes.get(&pid) {
                    Some(stat) if stat.parent != pid && stat.parent != 0 => pid = stat.parent,
                    _ => return false,
                }
            };
            processes
                .iter()
                .filter(|(pid, _)| in_tree(**pid))
                .map(|(_, stat)| stat.ticks)
                .sum()
        }
    }
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 where it cannot be asked).
pub fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

struct Stat {
    name: String,
    parent: u32,
    ticks: u64,
}

/// The fields of a `stat` line this needs: the name (in parentheses, which it may itself
/// hold), the parent, and user plus system time (fields 14 and 15).
fn parse_stat(line: &str) -> Option<Stat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let name = line[open + 1..close].to_string();
    let fields: Vec<&str> = line[close + 1..].split_whitespace().collect();
    // After the name: state (3), parent (4), …, utime (14), stime (15).
    let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
    Some(Stat {
        name,
        parent: u32::try_from(field(4)?).ok()?,
        ticks: field(14)? + field(15)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_its_name_parent_and_time_even_with_a_parenthesis_in_the_name() {
        let line = "4250 (dns-udp (0)) S 1 4250 4250 0 -1 4194560 9 0 0 0 2891 17 0 0 20 0 3 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!(stat.name, "dns-udp (0)");
        assert_eq!(stat.parent, 1);
        assert_eq!(stat.ticks, 2891 + 17);
    }
}
