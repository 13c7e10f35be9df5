package follow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/progress"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
)

// TUI is the Sink for a terminal: a live view redrawn in place (bubbletea),
// with log lines printed above it as they come. Create it with NewTUI, run
// Follow with it as the sink in another goroutine, call Run, and call
// Finish when Follow returns.
type TUI struct {
	// program draws the view.
	program *tea.Program
}

var _ Sink = (*TUI)(nil)

// NewTUI returns a TUI drawing on out (a terminal) and reading keys from
// in (nil: standard input). It stops when ctx ends; it installs no signal
// handler of its own (the command has one).
func NewTUI(ctx context.Context, in io.Reader, out io.Writer) *TUI {
	opts := []tea.ProgramOption{tea.WithContext(ctx), tea.WithOutput(out), tea.WithoutSignalHandler()}
	if in != nil {
		opts = append(opts, tea.WithInput(in))
	}
	return &TUI{program: tea.NewProgram(newTUIModel(time.Now()), opts...)}
}

// State redraws the view with s.
func (t *TUI) State(s State) { t.program.Send(stateMsg(s)) }

// Log prints a log line above the view.
func (t *TUI) Log(l Line) {
	t.program.Println(prefixStyle.Render(l.Prefix) + " " + l.Text)
}

// Finish tells the view that Follow returned: it draws the last State and
// stops.
func (t *TUI) Finish() { t.program.Send(finishMsg{}) }

// Run draws until Finish is called (false) or the user stops following
// with Ctrl-C or q, or ctx ends (true).
func (t *TUI) Run() (stopped bool, err error) {
	m, err := t.program.Run()
	if errors.Is(err, tea.ErrProgramKilled) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return m.(tuiModel).stopped, nil
}

// Messages of the view.
type (
	// stateMsg carries a new State.
	stateMsg State
	// tickMsg refreshes the elapsed time.
	tickMsg time.Time
	// finishMsg says Follow returned.
	finishMsg struct{}
)

// tuiModel is the bubbletea model of the view.
type tuiModel struct {
	// state is the latest State; have is false before the first.
	state State
	have  bool
	// now is the time of the last tick, for the elapsed time.
	now time.Time
	// width is the terminal's width.
	width int
	// bar draws the progress bar.
	bar progress.Model
	// stopped is true when the user stopped following; finished once
	// Follow returned.
	stopped, finished bool
}

func newTUIModel(now time.Time) tuiModel {
	return tuiModel{now: now, width: 80, bar: progress.New(progress.WithDefaultGradient(), progress.WithoutPercentage())}
}

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// Init starts the clock.
func (m tuiModel) Init() tea.Cmd { return tick() }

// Update handles States, ticks, the window's size and keys.
func (m tuiModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case stateMsg:
		m.state, m.have = State(msg), true
	case tickMsg:
		m.now = time.Time(msg)
		return m, tick()
	case tea.WindowSizeMsg:
		if msg.Width > 0 { // 0: a terminal that does not know its size
			m.width = msg.Width
		}
	case tea.KeyMsg:
		switch msg.String() {
		case "ctrl+c", "q":
			m.stopped = true
			return m, tea.Quit
		}
	case finishMsg:
		m.finished = true
		return m, tea.Quit
	}
	return m, nil
}

// View draws the view.
func (m tuiModel) View() string {
	if !m.have {
		if m.stopped || m.finished { // nothing to leave on the screen
			return ""
		}
		return dimStyle.Render("waiting for the Job...") + "\n"
	}
	return renderView(m.state, m.now, m.width, m.bar, m.stopped)
}

// Styles of the view. Colors are dropped on terminals without them; the
// glyphs alone tell the index phases apart.
var (
	titleStyle   = lipgloss.NewStyle().Bold(true)
	dimStyle     = lipgloss.NewStyle().Faint(true)
	prefixStyle  = lipgloss.NewStyle().Foreground(lipgloss.Color("6"))
	labelStyle   = lipgloss.NewStyle().Bold(true).Width(12)
	outcomeStyle = map[Outcome]lipgloss.Style{
		Running:  lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("4")),
		Complete: lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("2")),
		Failed:   lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("1")),
		Deleted:  lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("1")),
	}
	suspendedStyle = lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("3"))
	// indexGlyphs draw the index map, by phase.
	indexGlyphs = [4]string{
		IndexPending:   dimStyle.Render("·"),
		IndexRunning:   lipgloss.NewStyle().Foreground(lipgloss.Color("4")).Render("▒"),
		IndexSucceeded: lipgloss.NewStyle().Foreground(lipgloss.Color("2")).Render("█"),
		IndexFailed:    lipgloss.NewStyle().Foreground(lipgloss.Color("1")).Render("✗"),
	}
)

// View limits.
const (
	// maxIndexRows is the height of the index map; larger Jobs get
	// several indexes per cell.
	maxIndexRows = 8
	// maxIndexColumns is its width, at most.
	maxIndexColumns = 100
	// shownWarnings is how many of the latest Warnings the view lists.
	shownWarnings = 5
)

// renderView draws a State: header, progress bar, counters, index map,
// conditions, the latest warnings and, once the Job failed, its failed
// pods. It is a pure function of its
// arguments.
func renderView(s State, now time.Time, width int, bar progress.Model, stopped bool) string {
	width = max(width, 40)
	var b strings.Builder
	status := strings.ToUpper(s.Outcome.String())
	st := outcomeStyle[s.Outcome]
	if s.Outcome == Running && s.Suspended {
		status, st = "SUSPENDED", suspendedStyle
	}
	if s.Outcome == Running && s.Deleting {
		status = "DELETING"
	}
	fmt.Fprintf(&b, "%s %s  %s\n", st.Render(status), titleStyle.Render("job "+s.Namespace+"/"+s.Name), dimStyle.Render(describeSpec(s)))

	elapsed := s.Elapsed
	if s.Outcome == Running && !s.Started.IsZero() && now.After(s.Started) {
		elapsed = now.Sub(s.Started)
	}
	if s.WorkQueue {
		fmt.Fprintf(&b, "succeeded %d\n", s.Succeeded)
	} else {
		frac, percent := 0.0, int64(0)
		if s.Completions > 0 {
			frac = float64(s.Succeeded) / float64(s.Completions)
			percent = int64(s.Succeeded) * 100 / int64(s.Completions) // 199/200 is 99%, not 100%
		}
		count := fmt.Sprintf(" %d/%d %3d%%", s.Succeeded, s.Completions, percent)
		bar.Width = min(width-len(count)-1, 80)
		b.WriteString(bar.ViewAs(frac) + count + "\n")
	}
	fmt.Fprintf(&b, "active %d  ready %d  terminating %d  failed %d  elapsed %s\n",
		s.Active, s.Ready, s.Terminating, s.Failed, formatDuration(elapsed.Truncate(time.Second)))

	if s.Indexed && len(s.Indexes) > 0 {
		n := CountIndexes(s.Indexes)
		// Rows of a multiple of ten cells, so that indexes can be counted.
		cols := max(10, min(width-1, maxIndexColumns)/10*10)
		cells, per := Cells(s.Indexes, cols*maxIndexRows)
		legend := fmt.Sprintf("%s succeeded %d  %s running %d  %s pending %d  %s failed %d",
			indexGlyphs[IndexSucceeded], n[IndexSucceeded], indexGlyphs[IndexRunning], n[IndexRunning],
			indexGlyphs[IndexPending], n[IndexPending], indexGlyphs[IndexFailed], n[IndexFailed])
		if per > 1 {
			legend += dimStyle.Render(fmt.Sprintf("  (a cell: %d indexes)", per))
		}
		b.WriteString("\n" + labelStyle.Render("indexes") + legend + "\n")
		for i, c := range cells {
			b.WriteString(indexGlyphs[c])
			if (i+1)%cols == 0 || i == len(cells)-1 {
				b.WriteByte('\n')
			}
		}
	}

	if len(s.Conditions) > 0 {
		b.WriteString("\n" + titleStyle.Render("conditions") + "\n")
		for _, c := range s.Conditions {
			b.WriteString("  " + truncate(conditionLine(c), width-2) + "\n")
		}
	}
	if len(s.Warnings) > 0 {
		ws := s.Warnings
		header := "warnings"
		if len(ws) > shownWarnings {
			header = fmt.Sprintf("warnings (latest %d of %d)", shownWarnings, len(ws))
			ws = ws[len(ws)-shownWarnings:]
		}
		b.WriteString("\n" + titleStyle.Render(header) + "\n")
		for _, w := range ws {
			b.WriteString("  " + truncate(w.Last.Local().Format("15:04:05")+" "+warningLine(w), width-2) + "\n")
		}
	}
	if lines := failureLines(s, ""); len(lines) > 0 {
		b.WriteString("\n" + titleStyle.Render("failed pods") + "\n")
		for _, l := range lines {
			// Wrapped, not cut: this is what the user reads last.
			for i, part := range wrap(l, width-4) {
				indent := "  "
				if i > 0 {
					indent = "    "
				}
				b.WriteString(indent + part + "\n")
			}
		}
	}
	switch {
	case s.Finished():
		b.WriteString("\n" + st.Render(oneLine(resultLine(s))) + "\n")
	case stopped:
		b.WriteString("\n" + dimStyle.Render("stopped following") + "\n")
	default:
		b.WriteString("\n" + dimStyle.Render("Ctrl-C or q: stop following") + "\n")
	}
	return b.String()
}

// truncate cuts a one-line text to width cells.
func truncate(s string, width int) string {
	s = oneLine(s)
	if lipgloss.Width(s) <= width {
		return s
	}
	r := []rune(s)
	for len(r) > 0 && lipgloss.Width(string(r))+1 > width {
		r = r[:len(r)-1]
	}
	return string(r) + "…"
}

// wrap breaks a one-line text into lines of at most width cells, at spaces
// where it can, cutting words longer than a line.
func wrap(s string, width int) []string {
	width = max(width, 1)
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		for lipgloss.Width(word) > width {
			if line != "" {
				lines, line = append(lines, line), ""
			}
			r := []rune(word)
			n := len(r)
			for n > 1 && lipgloss.Width(string(r[:n])) > width {
				n--
			}
			lines, word = append(lines, string(r[:n])), string(r[n:])
		}
		switch {
		case line == "":
			line = word
		case lipgloss.Width(line)+1+lipgloss.Width(word) <= width:
			line += " " + word
		default:
			lines, line = append(lines, line), word
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
