//! The real-network benchmark behind the `netbench` binary: ctcp and kernel TCP
//! (Cubic, BBR, Reno) across a `ctcp-linkem` link between two network namespaces.
//!
//! - [`procs`]: child processes in their own process groups, killed on drop and on Ctrl-C;
//! - [`link`]: the emulated link, its counters, per-namespace sysctls;
//! - [`workload`]: origins (HTTP, rsync), the ctcp proxy pair, curl and rsync transfers;
//! - [`plan`]: what `--smoke`, `--quick`, `--full`, `--jitter`, `--large-pipe` and
//!   `--asymmetric` measure;
//! - [`run`]: runs a plan, one JSON row per transfer, and the fairness run (against
//!   kernel Cubic or BBR, or a kernel pair as its reference);
//! - [`report`], [`plots`]: the markdown table and the PNGs;
//! - [`validate`]: checks of the emulator's delay, loss and rate;
//! - [`chain`]: `--chain`, a satellite + radio path through a relay (issue 28);
//! - [`tandem`]: `--tandem`, seed 003's tandem of two lossy segments, 1 to 4 flows;
//! - [`multipath`]: `--multipath`, two parallel paths against single paths and kernel MPTCP
//!   (issue 29).
//! - [`udp`]: `--udp`, a UDP stream raw and through the tunnel (issue 27).

pub mod chain;
pub mod link;
pub mod multipath;
pub mod plan;
pub mod plots;
pub mod procs;
pub mod report;
pub mod run;
pub mod tandem;
pub mod udp;
pub mod validate;
pub mod workload;
