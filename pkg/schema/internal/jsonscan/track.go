package jsonscan

// Track returns where the top-level members of an object are after edits, as [Apply] made
// them: members are the object's members before, edits those Apply took (it leaves them
// sorted). A member an edit deletes whole (as [RemoveMember]'s does) is gone; one whose value
// an edit changes ends where the new value ends; an insertion right after the last member's
// value (as [AppendMember]'s is) is not part of it. So that no body is scanned again after an
// edit it made itself, a caller tracks its members instead; members added by AppendMember
// come from [Appended].
func Track(members []Member, edits []Edit) []Member {
	out := make([]Member, 0, len(members))
	for _, m := range members {
		removed := false
		var dKey, dVal, dEnd int // shifts of KeyStart and KeyEnd, ValStart, ValEnd
		for _, e := range edits {
			d := len(e.Repl) - (e.End - e.Start)
			switch {
			case e.Start <= m.KeyStart && e.End >= m.ValEnd && len(e.Repl) == 0:
				removed = true
			case e.End <= m.KeyStart:
				dKey += d
				dVal += d
				dEnd += d
			case e.End <= m.ValStart:
				dVal += d
				dEnd += d
			case e.Start < m.ValEnd && e.End <= m.ValEnd:
				dEnd += d
			}
		}
		if removed {
			continue
		}
		out = append(out, Member{
			KeyStart: m.KeyStart + dKey, KeyEnd: m.KeyEnd + dKey,
			ValStart: m.ValStart + dVal, ValEnd: m.ValEnd + dEnd,
		})
	}
	return out
}

// Appended returns members with the members that adds, edits made by [AppendMember] at one
// offset and applied in order by Apply to make b, put into b.
func Appended(b []byte, members []Member, adds []Edit) []Member {
	at := 0
	if len(adds) > 0 {
		at = adds[0].Start
		// Every member before the insertion moved by the edits applied before it: none.
	}
	for _, e := range adds {
		ks := at
		for ks < len(b) && b[ks] != '"' {
			ks++
		}
		ke := StringEnd(b, ks)
		end := at + len(e.Repl)
		members = append(members, Member{KeyStart: ks, KeyEnd: ke, ValStart: SkipWS(b, SkipWS(b, ke)+1), ValEnd: end})
		at = end
	}
	return members
}
