// The reactive layer: reading a loaded @Stored and an up-to-date @Computed (the hot path), a
// memory write with its invalidation, a write persisted to a key-value suite, and a recompute.

import Benchmark
import BenchSupport
import Coffer
import Foundation

final class Model {
    @Stored var count = 0
    @Computed var doubled: Int

    init() {
        $doubled = Computed { [$count] in $count.wrappedValue &* 2 }
    }
}

final class PersistedModel {
    @Stored(backed: .keyValue(key: "count")) var count = 0
}

let benchmarks: @Sendable () -> Void = {
    configureSuite()
    let scratch = ScratchDirectory("bench-state")
    let context = CofferContext(directory: scratch.url, durability: .coalesced)
    let model = CofferContext.$current.withValue(context) { Model() }
    model.count = 21
    blackHole(model.doubled)
    var next = 21

    Benchmark("stored.read", configuration: configuration(scaling: .mega)) { benchmark in
        for _ in benchmark.scaledIterations { blackHole(model.count) }
    }

    Benchmark("computed.read", configuration: configuration(scaling: .mega)) { benchmark in
        for _ in benchmark.scaledIterations { blackHole(model.doubled) }
    }

    Benchmark("stored.write.memory.recompute", configuration: configuration(scaling: .kilo)) {
        benchmark in
        for _ in benchmark.scaledIterations {
            next &+= 1  // an equal value would be a no-op
            model.count = next
            blackHole(model.doubled)
        }
    }

    let persisted = CofferContext.$current.withValue(context) { PersistedModel() }
    Benchmark("stored.write.keyvalue", configuration: configuration(scaling: .kilo)) { benchmark in
        for _ in benchmark.scaledIterations {
            next &+= 1
            persisted.count = next
        }
    }
}
