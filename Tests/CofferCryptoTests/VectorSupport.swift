import Foundation
import Testing

@testable import CofferCrypto
