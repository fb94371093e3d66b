package steps

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // maintenance windows name IANA time zones; the operator image has no zoneinfo

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// maintenanceWindowOpen reports whether an automatic restart may start now and, when not, says
// when the next window opens (or why none can) and gives that moment, zero when none opens.
func (s *State) maintenanceWindowOpen() (bool, string, time.Time) {
	windows := s.Spec.DataPlaneRestart.MaintenanceWindows
	if len(windows) == 0 {
		return true, "", time.Time{}
	}
	var next time.Time
	for i, mw := range windows {
		open, opens, err := windowOpen(mw, s.Now)
		if err != nil {
			return false, fmt.Sprintf("maintenance window %d is invalid: %v", i, err), time.Time{}
		}
		if open {
			return true, "", time.Time{}
		}
		if next.IsZero() || opens.Before(next) {
			next = opens
		}
	}
	if next.IsZero() {
		return false, "no maintenance window ever opens", time.Time{}
	}
	return false, "the next maintenance window opens at " + next.UTC().Format(time.RFC3339), next
}

var weekdays = map[v1alpha1.Weekday]time.Weekday{"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday,
	"Wed": time.Wednesday, "Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday}

// windowOpen reports whether the window is open at now and, when not, when it next opens.
func windowOpen(mw v1alpha1.MaintenanceWindow, now time.Time) (bool, time.Time, error) {
	loc, err := windowZone(mw.TimeZone)
	if err != nil {
		return false, time.Time{}, err
	}
	start, err := clockMinutes(mw.Start)
	if err != nil {
		return false, time.Time{}, err
	}
	end, err := clockMinutes(mw.End)
	if err != nil {
		return false, time.Time{}, err
	}
	length := end - start
	if length <= 0 {
		length += 24 * 60
	}
	days := map[time.Weekday]bool{}
	for _, d := range mw.Days {
		wd, ok := weekdays[d]
		if !ok {
			return false, time.Time{}, fmt.Errorf("unknown day %q", d)
		}
		days[wd] = true
	}
	local := now.In(loc)
	var next time.Time
	// The window that opened yesterday may still be open; look a week ahead for the next one.
	for i := -1; i <= 7; i++ {
		day := time.Date(local.Year(), local.Month(), local.Day()+i, 0, 0, 0, 0, loc)
		if len(days) > 0 && !days[day.Weekday()] {
			continue
		}
		opens := day.Add(time.Duration(start) * time.Minute)
		closes := opens.Add(time.Duration(length) * time.Minute)
		if !now.Before(opens) && now.Before(closes) {
			return true, time.Time{}, nil
		}
		if opens.After(now) && (next.IsZero() || opens.Before(next)) {
			next = opens
		}
	}
	return false, next, nil
}

func clockMinutes(hhmm string) (int, error) {
	h, m, ok := strings.Cut(hhmm, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("%q is not HH:MM", hhmm)
	}
	return hh*60 + mm, nil
}
