// A Duration as seconds, for the places that wait in loops of seconds or print them.

extension Duration {
    /// This duration in seconds, as C calls and timers take it (messages print ``Swift/Double/secondsText``).
    package var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}

extension Double {
    /// Seconds as a message prints them: at most two decimals, none when whole ("10", "0.5",
    /// "2.25"), so a lock wait of 9.999982 s reads "waited 10 s", not a float's 15 digits.
    package var secondsText: String {
        let hundredths = (self * 100).rounded()
        guard hundredths.isFinite, abs(hundredths) < 1e15 else { return "\(self)" }
        let total = Int(hundredths)
        let sign = total < 0 ? "-" : ""
        let whole = abs(total) / 100
        let fraction = abs(total) % 100
        if fraction == 0 { return "\(sign)\(whole)" }
        return fraction % 10 == 0 ? "\(sign)\(whole).\(fraction / 10)" : "\(sign)\(whole).\(fraction < 10 ? "0" : "")\(fraction)"
    }
}
