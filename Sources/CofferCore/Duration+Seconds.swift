// A Duration as seconds, for the places that wait in loops of seconds or print them.

extension Duration {
    /// This duration in seconds, as messages print it ("waited 10.0 s") and C calls take it.
    package var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
