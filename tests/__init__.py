"""The test suite: folders mirror the packages (aos, gates, observe, tracker), plus samples/ and project/."""
