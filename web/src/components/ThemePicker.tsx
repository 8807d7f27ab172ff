import { setThemeChoice, useTheme, type ThemeChoice } from '../theme';

export function ThemePicker() {
  const { choice } = useTheme();
  return (
    <label className="theme-picker">
      <span className="muted">Theme</span>
      <select value={choice} onChange={(event) => setThemeChoice(event.target.value as ThemeChoice)}>
        <option value="system">System</option>
        <option value="light">Light</option>
        <option value="dark">Dark</option>
      </select>
    </label>
  );
}
