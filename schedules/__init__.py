"""akg.schedules: per-target mapping of schedule trees and the knob space each exposes."""
