import CofferCore
import CofferCrypto
import CofferState
import CofferStorage
import CofferVault
import Foundation

/// A model as an application writes it: one counter, incremented with `$counter.update`.
final class CounterModel {
    @Stored(backed: .keyValue(key: "counter")) var counter = 0
}

final class VaultCounterModel {
    @Stored(backed: .vault(service: "counter", account: "stored")) var counter = 0
}

/// `stored-increment`: `times` increments through `$counter.update` in a context rooted at
/// `directory`, started together with the other children ("ready", then one line of input).
func storedIncrement(directory: String, times: Int, vault: Bool) throws {
    let key = try SecureBytes(copying: [UInt8](repeating: 0x5a, count: 32))
    let context = CofferContext(directory: URL(fileURLWithPath: directory))
        .with(VaultConfiguration(unlock: .key(key), createIfMissing: true))
    try CofferContext.$current.withValue(context) {
        let increment: () throws -> Void
        if vault {
            let model = VaultCounterModel()
            _ = try model.$counter.load()
            increment = { try model.$counter.update { $0 += 1 } }
        } else {
            let model = CounterModel()
            _ = try model.$counter.load()
            increment = { try model.$counter.update { $0 += 1 } }
        }
        say("ready")
        _ = readLine()
        for _ in 0..<times { try increment() }
    }
}
