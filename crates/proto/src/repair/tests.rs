//! The repair scheduler driven alone, by synthetic ACK and loss sequences.

use super::tail::tiny_flight_repairs;

#[test]
fn tiny_flights_get_repairs_for_a_99_percent_decode() {
    assert_eq!(tiny_flight_repairs(1, 0.0), 0, "a clean path needs none");
    assert_eq!(
        tiny_flight_repairs(0, 0.3),
        0,
        "nothing sent, nothing to cover"
    );
    // 0.05² = 0.25 % ≤ 1 %: one copy is enough at 5 %.
    assert_eq!(tiny_flight_repairs(1, 0.05), 1);
    // 0.08² = 0.64 %: still one at 8 %; 0.2² = 4 % needs a second (0.8 %).
    assert_eq!(tiny_flight_repairs(1, 0.08), 1);
    assert_eq!(tiny_flight_repairs(1, 0.2), 2);
    // 0.3³ = 2.7 %, 0.3⁴ = 0.8 %.
    assert_eq!(tiny_flight_repairs(1, 0.3), 3);
    // Two symbols at 30 %: P(≤ 1 of 5 arrive) = 3.1 %, so the cap of 3 holds.
    assert_eq!(tiny_flight_repairs(2, 0.3), 3);
    // Two at 5 %: P(≤ 1 of 3) = 0.7 %.
    assert_eq!(tiny_flight_repairs(2, 0.05), 1);
}
