import CofferCore
import Testing
